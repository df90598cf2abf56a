// meg-tokenize: text or JSONL documents to a token stream; also trains tokenizers (SentencePiece
// models, or byte-level BPEs as tokenizer.json) and decodes token streams back to text.
#include <unistd.h>

#include <chrono>

#include "core/cli.hpp"
#include "core/cli_groups.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "tokenizer/hf_bpe_train.hpp"
#include "tokenizer/sentencepiece_tokenizer.hpp"
#include "data/tokenize.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Turn text or JSONL documents into a token stream for meg-index (or train a tokenizer).",
               "meg-tokenize"};
  std::vector<std::string> inputs{"-"};
  std::string tokenizer_path, merges, output = "-", format = "jsonl";
  std::optional<std::string> separator;
  meg::TokenizeOptions options;
  unsigned workers = 0;
  int zstd_level = 3;
  bool train = false, decode = false;
  meg::SentencePieceTrainOptions train_options;
  meg::HfBpeTrainOptions hf_train_options;
  std::string train_format = "spm";

  app.add_option("files", inputs, "Input files (default: stdin); zstd-compressed input is detected");
  meg::cli::add_tokenizer_options(app, tokenizer_path, merges);
  app.add_option("--format", format, "Input (and --decode output) format")->check(CLI::IsMember({"jsonl", "text"}));
  app.add_option("--json-key", options.format.json_key, "JSONL key holding the text")->capture_default_str();
  app.add_option("--doc-separator", separator,
                 "Text format: documents end at a line equal to this ('' = blank line); default: one per line");
  app.add_flag("--append-eod", options.append_eod, "Append the end-of-document token to every document");
  app.add_flag("--add-special-tokens,!--no-add-special-tokens", options.add_special_tokens,
               "Put the tokenizer's own special tokens around each document, as Hugging Face's encode does "
               "(a tokenizer.json's post-processor: Llama 3's <|begin_of_text|>); default on");
  app.add_option("-w,--workers", workers, "Tokenizing threads (default: all cores)");
  app.add_option("-o,--output", output, "Output file (default: stdout)");
  bool zstd = false;
  app.add_flag("--zstd", zstd, "Compress the output with zstd");
  app.add_option("--zstd-level", zstd_level, "zstd level (1-19)")->check(CLI::Range(1, 19))->capture_default_str();
  app.add_flag("--skip-bad", options.skip_bad, "Skip malformed or empty documents and count them");
  app.add_flag("--decode", decode, "Turn a token stream back into documents");
  app.add_flag("--train", train, "Train a tokenizer on the documents (-o names it)");
  app.add_option("--train-format", train_format,
                 "Training: spm (a SentencePiece model) or hf (a byte-level BPE tokenizer.json)")
      ->check(CLI::IsMember({"spm", "hf"}))->capture_default_str();
  app.add_option("--pre-tokenizer", hf_train_options.pre_tokenizer,
                 "Training hf: the Split regex, llama3 or gpt2")->check(CLI::IsMember({"llama3", "gpt2"}))
      ->capture_default_str();
  app.add_option("--vocab-size", train_options.vocab_size, "Training: vocabulary size")
      ->check(meg::cli::whole_number(1, INT32_MAX))->capture_default_str();
  app.add_option("--model-type", train_options.model_type, "Training: bpe or unigram")
      ->check(CLI::IsMember({"bpe", "unigram"}))->capture_default_str();
  app.add_option("--character-coverage", train_options.character_coverage, "Training: share of characters covered")
      ->capture_default_str();
  app.add_option("--max-sentences", train_options.max_sentences, "Training: sample at most this many lines")
      ->check(meg::cli::whole_number());
  app.add_option("--seed", train_options.seed, "Training: random seed")->capture_default_str();
  // Defaults that keep text as it is (see man/meg-tokenize.1); each flag's other side is the library's.
  app.add_flag("--byte-fallback,!--no-byte-fallback", train_options.byte_fallback,
               "Training: unseen characters as UTF-8 byte pieces, not <unk> (default: on)");
  app.add_flag("--remove-extra-whitespaces,!--no-remove-extra-whitespaces", train_options.remove_extra_whitespaces,
               "Training: fold runs of spaces, drop leading and trailing ones (default: off)");
  app.add_option("--normalization-rule-name", train_options.normalization_rule_name,
                 "Training: identity, nfkc, nmt_nfkc, nfkc_cf or nmt_nfkc_cf")
      ->check(CLI::IsMember({"identity", "nfkc", "nmt_nfkc", "nfkc_cf", "nmt_nfkc_cf"}))->capture_default_str();
  app.add_flag("--allow-whitespace-only-pieces,!--no-allow-whitespace-only-pieces",
               train_options.allow_whitespace_only_pieces, "Training: runs of spaces as pieces (default: on)");
  app.add_flag("--split-digits", train_options.split_digits, "Training: every digit a piece of its own");
  app.add_option("--user-symbols", train_options.user_defined_symbols,
                 "Training: pieces kept whole wherever they occur, A,B,...")->delimiter(',');
  app.add_option("--control-symbols", train_options.control_symbols,
                 "Training: pieces no text encodes to (markers added by programs), A,B,...")->delimiter(',');
  app.add_option("--unk-id", train_options.unk_id, "Training: id of <unk>")->capture_default_str();
  app.add_option("--bos-id", train_options.bos_id, "Training: id of <s> (-1: none)")->capture_default_str();
  app.add_option("--eos-id", train_options.eos_id, "Training: id of </s>, the end-of-document token (-1: none)")
      ->capture_default_str();
  app.add_option("--pad-id", train_options.pad_id, "Training: id of <pad> (-1: none)")->capture_default_str();
  meg::cli::add_common_options(app, "meg-tokenize --tokenizer spm.model --append-eod docs.jsonl | meg-index -o data/docs");

  return meg::cli::run_tool(app, argc, argv, [&] {
    const auto start = std::chrono::steady_clock::now();
    options.format.jsonl = format == "jsonl";
    options.format.separator = separator;
    if (separator && options.format.jsonl) meg::input_error("--doc-separator applies to --format text only");
    options.workers = meg::cli::resolve_workers(workers);
    if (train && decode) meg::input_error("--train and --decode do not go together");

    if (!train && app.count("--train-format") > 0) meg::input_error("--train-format applies to --train only");
    if (train && train_format == "hf") {
      if (output == "-") meg::input_error("--train needs -o TOKENIZER_JSON");
      for (const char* spm_only : {"--model-type", "--character-coverage", "--max-sentences", "--seed",
                                   "--byte-fallback", "--remove-extra-whitespaces", "--normalization-rule-name",
                                   "--allow-whitespace-only-pieces", "--split-digits", "--unk-id", "--bos-id",
                                   "--eos-id", "--pad-id"})
        if (app.count(spm_only) > 0) meg::input_error("{} applies to --train-format spm only", spm_only);
      meg::TokenizeStats stats;
      const auto docs = meg::read_documents(inputs, options, stats);
      hf_train_options.vocab_size = train_options.vocab_size;
      hf_train_options.user_defined_symbols = train_options.user_defined_symbols;
      hf_train_options.control_symbols = train_options.control_symbols;
      hf_train_options.threads = options.workers;
      meg::log::info("training a byte-level BPE tokenizer.json of {} tokens on {} documents ({}); {} pre-tokenizer",
                     hf_train_options.vocab_size, stats.documents, meg::human_count(stats.text_bytes, "B"),
                     hf_train_options.pre_tokenizer);
      const auto summary = meg::train_hf_bpe(docs, hf_train_options, output);
      meg::log::info("wrote {}: {} tokens, {} merges learned from {} distinct pieces", output, summary.vocab_size,
                     summary.merges, summary.pieces);
      if (summary.vocab_size < size_t(hf_train_options.vocab_size))
        meg::log::warn("the text ran out of pairs to merge: {} tokens, not the {} asked", summary.vocab_size,
                       hf_train_options.vocab_size);
      return 0;
    }
    if (app.count("--pre-tokenizer") > 0) meg::input_error("--pre-tokenizer applies to --train-format hf only");
    if (train) {
      if (output == "-") meg::input_error("--train needs -o MODEL_FILE");
      meg::TokenizeStats stats;
      const auto docs = meg::read_documents(inputs, options, stats);
      meg::log::info("training a {} model of {} pieces on {} documents ({}); normalization {}, byte fallback {}, "
                     "{} extra whitespace", train_options.model_type, train_options.vocab_size, stats.documents,
                     meg::human_count(stats.text_bytes, "B"), train_options.normalization_rule_name,
                     train_options.byte_fallback ? "on" : "off",
                     train_options.remove_extra_whitespaces ? "removing" : "keeping");
      train_options.threads = static_cast<int>(options.workers);
      meg::train_sentencepiece(docs, train_options, output);
      meg::log::info("wrote {}", output);
      return 0;
    }

    const auto tokenizer = meg::load_tokenizer(tokenizer_path, merges);
    if (decode) {
      if (inputs.size() != 1) meg::input_error("--decode reads one token stream");
      meg::TokenStreamReader in(inputs[0]);
      meg::ByteWriter out(output, zstd ? zstd_level : 0);
      const uint64_t docs = meg::decode_stream(in, *tokenizer, options.format, out);
      out.commit();
      meg::log::info("decoded {} documents", docs);
      return 0;
    }

    if (output == "-" && ::isatty(STDOUT_FILENO) == 1)
      meg::input_error("the token stream is binary: send it to a file (-o) or a pipe, not a terminal");
    meg::ByteWriter out(output, zstd ? zstd_level : 0);
    meg::TokenStreamWriter writer(out, meg::TokenStreamHeader::for_vocab(tokenizer->vocab_size(),
                                                                         tokenizer->eod_id(), tokenizer->fingerprint()));
    const auto stats = meg::tokenize_inputs(inputs, *tokenizer, options, writer);
    writer.finish();
    out.commit();

    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    meg::log::info("{} documents, {} tokens from {} of text in {:.2f} s ({}/s, {}/s; {}, {} worker{}){}",
                   stats.documents, stats.tokens, meg::human_count(stats.text_bytes, "B"), secs,
                   meg::human_count(stats.input_bytes / secs, "B"), meg::human_count(stats.tokens / secs, "tokens"),
                   tokenizer->describe(), options.workers, options.workers == 1 ? "" : "s",
                   stats.skipped_bad + stats.skipped_empty > 0
                       ? fmt::format("; skipped {} bad and {} empty", stats.skipped_bad, stats.skipped_empty)
                       : "");
    return 0;
  });
}
