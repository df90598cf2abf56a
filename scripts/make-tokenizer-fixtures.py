#!/usr/bin/env python3
"""Makes tests/data/hf-tokenizers/: a Hugging Face tokenizer.json of each family that open models
ship, and the ids Hugging Face `tokenizers` gives for a set of varied texts, for meg's parity tests.

    python3 scripts/make-tokenizer-fixtures.py [OUT_DIR]    (default tests/data/hf-tokenizers)

Each family is built the way its models' files are (normalizer, pre-tokenizer, model, decoder,
post-processor, added tokens), with a vocabulary trained here on this repository's own text, so
nothing is downloaded. Written:
    texts.jsonl            the texts, {"text": ...} per line
    NAME/tokenizer.json    the tokenizer
    NAME/expected.jsonl    per text: {"ids": encode(text) without special tokens,
                           "ids_special": with them (the post-processor's), "decoded": decode(ids)}
Needs `tokenizers` (and nothing else); run it where that is installed and commit what it writes.
"""
import glob
import json
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "hf-tokenizers")

# The split patterns of the families' tokenizer.json files, as those files spell them.
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Texts that reach every branch of the patterns and the models: scripts, marks, digits of other
# systems, contractions in both cases, whitespace runs and line ends of every kind, code, emoji
# sequences, special tokens inside the text, bytes no vocabulary holds.
TEXTS = [
    "Hello, world! This is a test.",
    "  leading spaces, trailing spaces   ",
    "Tabs\tand\t\ttabs, lines\nand\n\nblank lines\r\nand CRLF\r\n",
    "I'm sure you'll see they've said it's 'quoted' and we'd go; THEY'LL SAY IT'S FINE; O'Neil's",
    "Numbers: 1 12 123 1234 12345 3.14159 -42 1e10 1,000,000 007 and 2024-12-31T23:59:59Z",
    "Fullwidth １２３ Arabic-Indic ٠١٢٣ Devanagari ५६ superscript x² Roman Ⅻ fractions ½ ¾",
    "Français : « ça va ? » — oui, très bien. Ünïcödé naïve café résumé",
    "Deutsch: Straße, Größe, ÄÖÜ äöü; Español: ¿Dónde está el niño? ¡Olé!",
    "Русский текст: Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Ωμέγα ΣΊΣΥΦΟΣ",
    "日本語のテキスト：東京は日本の首都です。カタカナとひらがな、漢字。",
    "中文：我们今天去公园散步，天气很好！繁體字也可以。",
    "한국어: 다람쥐 헌 쳇바퀴에 타고파. 안녕하세요",
    "العربية: مرحبا بالعالم، هذا اختبار. עברית: שלום עולם",
    "हिन्दी: नमस्ते दुनिया। ไทย: สวัสดีชาวโลก বাংলা: ওহে বিশ্ব",
    "Combining marks: e\u0301 a\u0308 n\u0303 (decomposed) versus é ä ñ (composed); Z\u0351\u036b\u0343a\u0352l\u0346go",
    "Emoji: 😀 😃 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷 and symbols ™ © ® ∑ ∫ √ ∞ ≠ ≤ → ⇒ ★",
    "def tokenize(text: str) -> list[int]:\n    return [ord(c) for c in text if c != '\\n']  # comment\n",
    "int main(int argc, char** argv) {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
    "<div class=\"x\">&amp; &lt;tag&gt;</div> https://example.com/path?q=1&r=two#frag user@example.org",
    "$ ls -la /usr/local/bin | grep -E '^d' && echo \"done\" >> log.txt 2>&1",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    "Special tokens in text: <|endoftext|> and <|begin_of_text|>hello<|eot_id|> and <s>[INST] hi [/INST]</s>",
    "Qwen chat: <|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\nFour.<|im_end|>",
    "BERT style: [CLS] Is this [MASK] here? [SEP] lower UPPER MiXeD",
    "Punctuation runs: !!! ??? ... --- *** ((( ))) [[[ ]]] {{{ }}} ;;; ::: ''' \"\"\" ```",
    "Many spaces:          ten, then a tab\t\t\tthree, then     \n     newline runs\n\n\n\n",
    "Unicode spaces: a\u00a0b\u2003c\u2009d\u3000e\u200bf\u202fg\u205fh and line separator\u2028next\u2029para",
    "Control characters: bell\x07 escape\x1b[0m null-free del\x7f form\x0cfeed vertical\x0btab",
    "Rare characters no vocabulary here holds: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀 𐍈 🜁 \U0010fffd \ue000",
    "Case: HELLO World hELLO wORLD Élan ÉLAN ß SS ǅ ǈ ﬁ ﬂ",
    "A sentence with a very long word: Pneumonoultramicroscopicsilicovolcanoconiosis and Donaudampfschifffahrtsgesellschaftskapitän",
    "x" * 300,
    "1234567890" * 12,
    "",
    " ",
    "\n",
    "a",
    "'s",
    "   ",
    "a  b   c    d",
    "trailing newline\n",
    "Ends with space ",
]

SPECIALS = {
    "gpt2": ["<|endoftext|>"],
    "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "neox": ["<|endoftext|>", "<|padding|>"],
    "tekken": ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"],
    "spm": ["<unk>", "<s>", "</s>"],
    "metaspace": ["<unk>", "<s>", "</s>"],
    "wordpiece": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
}


def corpus():
    """This repository's prose and code, in a fixed order."""
    files = sorted(glob.glob(os.path.join(ROOT, "man", "*")) + glob.glob(os.path.join(ROOT, "docs", "*.md")) +
                   [os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "lib", "*", "*.hpp")))
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for paragraph in f.read().split("\n\n"):
                if paragraph.strip():
                    yield paragraph


def byte_level(pre, vocab_size, specials, normalizer=None, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    return tok


def split_then_bytes(pattern):
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                             use_regex=False)])


def sentencepiece_like(vocab_size, metaspace_form):
    """A Llama-2/Mistral-style BPE over "▁"-joined words with byte fallback, as transformers
    converts SentencePiece models: the older files spell it as a normalizer (prepend "▁", spaces to
    "▁") with no pre-tokenizer, the newer ones as a Metaspace pre-tokenizer."""
    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[], show_progress=False)
    trainer_tok.train_from_iterator(corpus(), trainer=trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    if metaspace_form:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
        tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(content=" ", left=1, right=0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ["<unk>", "<s>", "</s>"]])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    return tok


def wordpiece(vocab_size):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS["wordpiece"], show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


def build(name):
    v = 1200
    if name == "gpt2":
        return byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), v, SPECIALS[name])
    if name == "llama3":
        tok = byte_level(split_then_bytes(LLAMA3), v, SPECIALS[name], ignore_merges=True)
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                           pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                                           special_tokens=[("<|begin_of_text|>", bos)])
        return tok
    if name == "qwen2":
        tok = byte_level(split_then_bytes(QWEN2), v, SPECIALS[name], normalizer=normalizers.NFC())
        # Qwen3's reasoning markers are added tokens that are not special.
        tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                        AddedToken("</think>", special=False, normalized=False)])
        return tok
    if name == "neox":
        tok = byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), v, SPECIALS[name],
                         normalizer=normalizers.NFC())
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        # GPT-NeoX's vocabulary ends with runs of spaces as added tokens, matched before the model.
        tok.add_tokens([AddedToken(" " * n, special=False, normalized=True) for n in range(2, 9)])
        return tok
    if name == "tekken":
        tok = byte_level(split_then_bytes(TEKKEN), v, SPECIALS[name])
        return tok
    if name in ("spm", "metaspace"):
        return sentencepiece_like(v, metaspace_form=name == "metaspace")
    if name == "wordpiece":
        return wordpiece(v)
    raise ValueError(name)


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "texts.jsonl"), "w", encoding="utf-8") as f:
        for t in TEXTS:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    for name in SPECIALS:
        tok = build(name)
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"), pretty=True)
        # The saved file, read back, is what meg reads: encode with it, not with the object built.
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "expected.jsonl"), "w", encoding="utf-8") as f:
            for t in TEXTS:
                ids = tok.encode(t, add_special_tokens=False).ids
                ids_special = tok.encode(t, add_special_tokens=True).ids
                decoded = tok.decode(ids, skip_special_tokens=False)
                f.write(json.dumps({"ids": ids, "ids_special": ids_special, "decoded": decoded}, ensure_ascii=False) + "\n")
        print(f"{name}: vocab {tok.get_vocab_size()}, {os.path.getsize(os.path.join(d, 'tokenizer.json'))} bytes")


if __name__ == "__main__":
    main()
