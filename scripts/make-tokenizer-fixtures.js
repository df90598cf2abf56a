#!/usr/bin/env node
// Makes tests/data/hf-tokenizers/: a Hugging Face tokenizer.json of each family that open models
// ship, and the ids Hugging Face tokenizers gives for a set of varied texts, for meg's parity
// tests (tests/unit/test_hf_tokenizer.cpp).
//
//   npm install --prefix /tmp/hf tokenizers@0.23.2     (Hugging Face's Node binding of the same
//   NODE_PATH=/tmp/hf/node_modules node scripts/make-tokenizer-fixtures.js [OUT_DIR]
//                                                       Rust library the Python package wraps)
//
// Each family's file is written the way its models' files are (normalizer, pre-tokenizer, model,
// decoder, post-processor, added tokens), with a vocabulary learned here by plain BPE (or picked
// by frequency, for WordPiece) from this repository's own text, so nothing is downloaded; the
// library then loads each file and encodes the texts. Written:
//   texts.jsonl            the texts, {"text": ...} per line
//   NAME/tokenizer.json    the tokenizer
//   NAME/expected.jsonl    per text: {"ids": encode(text) without special tokens,
//                          "ids_special": with them (the post-processor's), "decoded": decode(ids)}
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const ROOT = path.dirname(__dirname);
const OUT = process.argv[2] || path.join(ROOT, 'tests', 'data', 'hf-tokenizers');

// The split patterns of the families' tokenizer.json files, as those files spell them.
const LLAMA3 = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const QWEN2 = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const TEKKEN = String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

// Texts that reach every branch of the patterns and the models: scripts, marks, digits of other
// systems, contractions in both cases, whitespace runs and line ends of every kind, code, emoji
// sequences, special tokens inside the text, characters no vocabulary holds.
const TEXTS = [
  'Hello, world! This is a test.',
  '  leading spaces, trailing spaces   ',
  'Tabs\tand\t\ttabs, lines\nand\n\nblank lines\r\nand CRLF\r\n',
  "I'm sure you'll see they've said it's 'quoted' and we'd go; THEY'LL SAY IT'S FINE; O'Neil's",
  'Numbers: 1 12 123 1234 12345 3.14159 -42 1e10 1,000,000 007 and 2024-12-31T23:59:59Z',
  'Fullwidth １２３ Arabic-Indic ٠١٢٣ Devanagari ५६ superscript x² Roman Ⅻ fractions ½ ¾',
  'Français : « ça va ? » — oui, très bien. Ünïcödé naïve café résumé',
  'Deutsch: Straße, Größe, ÄÖÜ äöü; Español: ¿Dónde está el niño? ¡Olé!',
  'Русский текст: Съешь же ещё этих мягких французских булок, да выпей чаю.',
  'Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Ωμέγα ΣΊΣΥΦΟΣ',
  '日本語のテキスト：東京は日本の首都です。カタカナとひらがな、漢字。',
  '中文：我们今天去公园散步，天气很好！繁體字也可以。',
  '한국어: 다람쥐 헌 쳇바퀴에 타고파. 안녕하세요',
  'العربية: مرحبا بالعالم، هذا اختبار. עברית: שלום עולם',
  'हिन्दी: नमस्ते दुनिया। ไทย: สวัสดีชาวโลก বাংলা: ওহে বিশ্ব',
  'Combining marks: e\u0301 a\u0308 n\u0303 (decomposed) versus é ä ñ (composed); Z\u0351\u036b\u0343a\u0352l\u0346go',
  'Emoji: 😀 😃 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷 and symbols ™ © ® ∑ ∫ √ ∞ ≠ ≤ → ⇒ ★',
  "def tokenize(text: str) -> list[int]:\n    return [ord(c) for c in text if c != '\\n']  # comment\n",
  'int main(int argc, char** argv) {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n',
  '<div class="x">&amp; &lt;tag&gt;</div> https://example.com/path?q=1&r=two#frag user@example.org',
  '$ ls -la /usr/local/bin | grep -E \'^d\' && echo "done" >> log.txt 2>&1',
  '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
  'Special tokens in text: <|endoftext|> and <|begin_of_text|>hello<|eot_id|> and <s>[INST] hi [/INST]</s>',
  'Qwen chat: <|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\nFour.<|im_end|>',
  'BERT style: [CLS] Is this [MASK] here? [SEP] lower UPPER MiXeD',
  'Punctuation runs: !!! ??? ... --- *** ((( ))) [[[ ]]] {{{ }}} ;;; ::: \'\'\' """ ```',
  'Many spaces:          ten, then a tab\t\t\tthree, then     \n     newline runs\n\n\n\n',
  'Unicode spaces: a\u00a0b\u2003c\u2009d\u3000e\u200bf\u202fg\u205fh and line separator\u2028next\u2029para',
  'Control characters: bell\x07 escape\x1b[0m null-free del\x7f form\x0cfeed vertical\x0btab',
  'Rare characters no vocabulary here holds: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀 𐍈 🜁 \u{10fffd} \ue000',
  'Case: HELLO World hELLO wORLD Élan ÉLAN ß SS ǅ ǈ ﬁ ﬂ',
  'A sentence with a very long word: Pneumonoultramicroscopicsilicovolcanoconiosis and Donaudampfschifffahrtsgesellschaftskapitän',
  'x'.repeat(300),
  '1234567890'.repeat(12),
  '',
  ' ',
  '\n',
  'a',
  "'s",
  '   ',
  'a  b   c    d',
  'trailing newline\n',
  'Ends with space ',
  'Added tokens glued: x<|im_end|>y <think>a</think>b [SEP][CLS] <s><s>',
];

const SPECIALS = {
  gpt2: ['<|endoftext|>'],
  llama3: ['<|begin_of_text|>', '<|end_of_text|>', '<|start_header_id|>', '<|end_header_id|>', '<|eot_id|>'],
  qwen2: ['<|endoftext|>', '<|im_start|>', '<|im_end|>'],
  neox: ['<|endoftext|>', '<|padding|>'],
  tekken: ['<unk>', '<s>', '</s>', '[INST]', '[/INST]'],
  spm: ['<unk>', '<s>', '</s>'],
  metaspace: ['<unk>', '<s>', '</s>'],
  wordpiece: ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'],
};

// This repository's prose and code, in a fixed order, as paragraphs.
function corpus() {
  const files = [];
  const add = (dir, test) => {
    for (const f of fs.readdirSync(path.join(ROOT, dir)).sort()) if (test(f)) files.push(path.join(ROOT, dir, f));
  };
  add('man', () => true);
  add('docs', (f) => f.endsWith('.md'));
  files.push(path.join(ROOT, 'README.md'));
  for (const d of fs.readdirSync(path.join(ROOT, 'lib')).sort())
    if (fs.statSync(path.join(ROOT, 'lib', d)).isDirectory()) add(path.join('lib', d), (f) => f.endsWith('.hpp'));
  const out = [];
  for (const f of files) for (const p of fs.readFileSync(f, 'utf8').split('\n\n')) if (p.trim()) out.push(p);
  return out;
}

// GPT-2's bytes_to_unicode().
function byteChars() {
  const chars = [];
  let next = 256;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 33 && b <= 126) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    chars.push(String.fromCodePoint(printable ? b : next++));
  }
  return chars;
}
const BYTE_CHARS = byteChars();
const toByteLevel = (s) => Array.from(Buffer.from(s, 'utf8'), (b) => BYTE_CHARS[b]);

// Plain BPE: WORDS maps a word (its symbols joined by \0) to its count; returns the merges, most
// frequent pair first (ties to the smaller pair, so that the result is the same every time).
function learnMerges(words, count) {
  const entries = [...words].map(([w, n]) => [w.split('\0'), n]);
  const merges = [];
  while (merges.length < count) {
    const pairs = new Map();
    for (const [syms, n] of entries)
      for (let i = 0; i + 1 < syms.length; ++i) {
        const key = syms[i] + '\0' + syms[i + 1];
        pairs.set(key, (pairs.get(key) || 0) + n);
      }
    let best = null, bestCount = 1;
    for (const [key, n] of pairs) if (n > bestCount || (n === bestCount && best !== null && key < best)) best = key, bestCount = n;
    if (best === null) break;
    const [a, b] = best.split('\0');
    merges.push([a, b]);
    for (const e of entries) {
      const syms = e[0], merged = [];
      for (let i = 0; i < syms.length; ++i) {
        if (i + 1 < syms.length && syms[i] === a && syms[i + 1] === b) merged.push(a + b), ++i;
        else merged.push(syms[i]);
      }
      e[0] = merged;
    }
  }
  return merges;
}

function countWords(pieces) {
  const words = new Map();
  for (const p of pieces) words.set(p, (words.get(p) || 0) + 1);
  return words;
}

const addedToken = (id, content, special, normalized) =>
  ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized, special });

function bpeModel(vocab, merges, extra = {}) {
  return { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
           fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges: merges.map(([a, b]) => [a, b]), ...extra };
}

// A byte-level BPE of SIZE tokens: the specials, the 256 byte characters, then the merges.
function byteLevelVocab(specials, size) {
  const gpt2 = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
  const pieces = [];
  for (const p of corpus()) for (const m of p.matchAll(gpt2)) pieces.push(toByteLevel(m[0]).join('\0'));
  const vocab = {};
  for (const s of specials) vocab[s] = Object.keys(vocab).length;
  for (const c of BYTE_CHARS) vocab[c] = Object.keys(vocab).length;
  const merges = learnMerges(countWords(pieces), size - Object.keys(vocab).length);
  for (const [a, b] of merges) if (!(a + b in vocab)) vocab[a + b] = Object.keys(vocab).length;
  return { vocab, merges, specials: specials.map((s) => addedToken(vocab[s], s, true, false)) };
}

const splitThenBytes = (pattern) => ({
  type: 'Sequence',
  pretokenizers: [{ type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated', invert: false },
                  { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }],
});
const byteLevelPre = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
const byteLevelDecoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };

function template(first, id) {
  return {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: first, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [{ SpecialToken: { id: first, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
           { SpecialToken: { id: first, type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
    special_tokens: { [first]: { id: first, ids: [id], tokens: [first] } },
  };
}

function tokenizerJson(parts) {
  return { version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null, pre_tokenizer: null,
           post_processor: null, decoder: null, ...parts };
}

// A Llama-2/Mistral-style BPE over "▁"-joined words with byte fallback, as transformers converts
// SentencePiece models: the older files spell it as a normalizer (prepend "▁", spaces to "▁")
// with no pre-tokenizer, the newer ones as a Metaspace pre-tokenizer.
function sentencepieceLike(size, metaspace) {
  const vocab = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (let b = 0; b < 256; ++b) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = Object.keys(vocab).length;
  const pieces = [];
  for (const p of corpus()) for (const w of p.split(' ')) if (w) pieces.push(Array.from('\u2581' + w).join('\0'));
  const chars = new Map();
  for (const p of pieces) for (const c of p.split('\0')) chars.set(c, (chars.get(c) || 0) + 1);
  // The common characters only, so that byte fallback has work to do.
  for (const [c] of [...chars].filter(([, n]) => n >= 20).sort((x, y) => y[1] - x[1] || (x[0] < y[0] ? -1 : 1)))
    vocab[c] = Object.keys(vocab).length;
  const known = (p) => p.split('\0').every((c) => c in vocab);
  const merges = learnMerges(countWords(pieces.filter(known)), size - Object.keys(vocab).length);
  for (const [a, b] of merges) if (!(a + b in vocab)) vocab[a + b] = Object.keys(vocab).length;
  const j = tokenizerJson({
    added_tokens: ['<unk>', '<s>', '</s>'].map((s) => addedToken(vocab[s], s, true, false)),
    model: bpeModel(vocab, merges, { unk_token: '<unk>', fuse_unk: true, byte_fallback: true }),
    post_processor: template('<s>', 1),
  });
  if (metaspace) {
    j.pre_tokenizer = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false };
    j.decoder = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false };
  } else {
    j.normalizer = { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '\u2581' },
                                                      { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' }] };
    j.decoder = { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
                                               { type: 'ByteFallback' }, { type: 'Fuse' },
                                               { type: 'Strip', content: ' ', start: 1, stop: 0 }] };
  }
  return j;
}

// BERT's uncased WordPiece: the characters seen (alone and as ##subwords), then the most frequent
// words and word endings.
function wordpiece(size) {
  const specials = SPECIALS.wordpiece;
  const vocab = {};
  for (const s of specials) vocab[s] = Object.keys(vocab).length;
  const words = new Map();
  for (const p of corpus())
    for (const w of p.normalize('NFD').replace(/\p{Mn}/gu, '').toLowerCase().split(/[\s\p{P}!-\/:-@\[-`{-~]+/u))
      if (w) words.set(w, (words.get(w) || 0) + 1);
  const chars = new Set();
  for (const w of words.keys()) for (const c of w) chars.add(c);
  for (const c of [...chars].sort()) vocab[c] = Object.keys(vocab).length;
  for (const c of [...chars].sort()) vocab['##' + c] = Object.keys(vocab).length;
  const endings = new Map();
  for (const [w, n] of words) for (let k = 2; k <= 4 && k < w.length; ++k) endings.set('##' + w.slice(-k), (endings.get('##' + w.slice(-k)) || 0) + n);
  const ranked = [...words, ...endings].sort((x, y) => y[1] - x[1] || (x[0] < y[0] ? -1 : 1));
  for (const [t] of ranked) {
    if (Object.keys(vocab).length >= size) break;
    if (!(t in vocab)) vocab[t] = Object.keys(vocab).length;
  }
  return tokenizerJson({
    added_tokens: specials.map((s) => addedToken(vocab[s], s, true, false)),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
               { SpecialToken: { id: '[SEP]', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
             { SpecialToken: { id: '[SEP]', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } },
             { SpecialToken: { id: '[SEP]', type_id: 1 } }],
      special_tokens: { '[CLS]': { id: '[CLS]', ids: [vocab['[CLS]']], tokens: ['[CLS]'] },
                        '[SEP]': { id: '[SEP]', ids: [vocab['[SEP]']], tokens: ['[SEP]'] } },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab },
  });
}

function build(name) {
  const size = 1200;
  if (name === 'spm' || name === 'metaspace') return sentencepieceLike(size, name === 'metaspace');
  if (name === 'wordpiece') return wordpiece(size);
  const { vocab, merges, specials } = byteLevelVocab(SPECIALS[name], size);
  const j = tokenizerJson({ added_tokens: specials, model: bpeModel(vocab, merges), decoder: byteLevelDecoder });
  if (name === 'gpt2') {
    j.pre_tokenizer = byteLevelPre;
  } else if (name === 'llama3') {
    j.pre_tokenizer = splitThenBytes(LLAMA3);
    j.model.ignore_merges = true;
    j.post_processor = template('<|begin_of_text|>', vocab['<|begin_of_text|>']);
  } else if (name === 'qwen2') {
    j.normalizer = { type: 'NFC' };
    j.pre_tokenizer = splitThenBytes(QWEN2);
    // Qwen3's reasoning markers are added tokens that are not special.
    const next = Object.keys(vocab).length;
    j.added_tokens.push(addedToken(next, '<think>', false, false), addedToken(next + 1, '</think>', false, false));
  } else if (name === 'neox') {
    j.normalizer = { type: 'NFC' };
    j.pre_tokenizer = byteLevelPre;
    j.post_processor = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: true };
    // GPT-NeoX's vocabulary ends with runs of spaces as added tokens, matched before the model.
    const next = Object.keys(vocab).length;
    for (let n = 2; n <= 8; ++n) j.added_tokens.push(addedToken(next + n - 2, ' '.repeat(n), false, true));
  } else if (name === 'tekken') {
    j.pre_tokenizer = splitThenBytes(TEKKEN);
  }
  return j;
}

async function main() {
  fs.mkdirSync(OUT, { recursive: true });
  fs.writeFileSync(path.join(OUT, 'texts.jsonl'), TEXTS.map((t) => JSON.stringify({ text: t }) + '\n').join(''));
  for (const name of Object.keys(SPECIALS)) {
    const dir = path.join(OUT, name);
    fs.mkdirSync(dir, { recursive: true });
    const file = path.join(dir, 'tokenizer.json');
    fs.writeFileSync(file, JSON.stringify(build(name), null, 2) + '\n');
    // The saved file, read back by the library, is what meg reads.
    const tok = Tokenizer.fromFile(file);
    const lines = [];
    for (const t of TEXTS) {
      const ids = (await tok.encode(t, null, { addSpecialTokens: false })).getIds();
      const idsSpecial = (await tok.encode(t, null, { addSpecialTokens: true })).getIds();
      const decoded = await tok.decode(ids, false);
      lines.push(JSON.stringify({ ids, ids_special: idsSpecial, decoded }) + '\n');
    }
    fs.writeFileSync(path.join(dir, 'expected.jsonl'), lines.join(''));
    console.log(`${name}: vocab ${tok.getVocabSize(true)}, ${fs.statSync(file).size} bytes`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
