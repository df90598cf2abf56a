#include "tokenizer/sentencepiece_model.hpp"

#include <bit>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <utility>

#include "core/bytes.hpp"
#include "core/error.hpp"
#include "core/utf8.hpp"
#include "tokenizer/tokenizer.hpp"

namespace meg {

namespace {

using Model = SentencePieceModel;

enum Wire { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

// One field of a message; offsets count from the start of the file.
struct Field {
  uint32_t number = 0;
  int wire = 0;
  uint64_t value = 0;  // a varint, or the bits of a fixed32 or fixed64
  std::string_view bytes;  // of a length-delimited field
  size_t offset = 0;  // of the field's key
  size_t bytes_offset = 0;  // of BYTES
};

// The fields of one message, FILE[begin, end), in the wire format. Everything the format does not
// allow is refused: a varint or a length running past the message, a field number of 0, a wire type
// other than varint, fixed64, length-delimited or fixed32 (groups are long deprecated and no model
// has them).
class Message {
 public:
  Message(std::string_view file, size_t begin, size_t end, const std::string& path)
      : file_(file), pos_(begin), end_(end), path_(path) {}

  bool next(Field& f) {
    if (pos_ == end_) return false;
    f = Field{};
    f.offset = pos_;
    const uint64_t key = varint("field key");
    if (key >> 3 == 0 || key > std::numeric_limits<uint32_t>::max())
      malformed(f.offset, fmt::format("field number {} is not a protobuf field number", key >> 3));
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<int>(key & 7);
    switch (f.wire) {
      case kVarint: f.value = varint("varint"); break;
      case kFixed64: f.value = load_unaligned<uint64_t>(take(8, f).data()); break;
      case kFixed32: f.value = load_unaligned<uint32_t>(take(4, f).data()); break;
      case kLength: {
        const uint64_t n = varint("length");
        if (n > end_ - pos_)
          malformed(f.offset, fmt::format("field {} of {} bytes runs past the end of its message (byte {})", f.number,
                                          n, end_));
        f.bytes_offset = pos_;
        f.bytes = take(n, f);
        break;
      }
      default: malformed(f.offset, fmt::format("field {} has wire type {}, which is not used", f.number, f.wire));
    }
    return true;
  }

  // Refuses a known field F (NAME in the proto) sent with another wire type than WIRE: the
  // library would set it aside unread and go on with its default.
  void expect(const Field& f, int wire, std::string_view name) const {
    if (f.wire != wire)
      malformed(f.offset, fmt::format("{} (field {}) has wire type {}, not {}", name, f.number, f.wire, wire));
  }
  // A field of type int32 or enum, which writers send sign-extended to 64 bits. The library would
  // keep the low 32 bits of a larger value; refused instead, as no writer makes one.
  int32_t int32(const Field& f, std::string_view name) const {
    expect(f, kVarint, name);
    const auto v = static_cast<int32_t>(f.value);
    if (static_cast<uint64_t>(int64_t{v}) != f.value)
      malformed(f.offset, fmt::format("{} (field {}) of {} does not fit 32 bits", name, f.number, f.value));
    return v;
  }
  bool boolean(const Field& f, std::string_view name) const {
    expect(f, kVarint, name);
    return f.value != 0;
  }
  std::string_view bytes(const Field& f, std::string_view name) const {
    expect(f, kLength, name);
    return f.bytes;
  }
  // The message that field F holds.
  Message nested(const Field& f, std::string_view name) const {
    expect(f, kLength, name);
    return Message(file_, f.bytes_offset, f.bytes_offset + f.bytes.size(), path_);
  }

 private:
  [[noreturn]] void malformed(size_t at, const std::string& what) const {
    input_error("{}: byte {}: not a SentencePiece model: {}", path_, at, what);
  }
  uint64_t varint(std::string_view what) {
    const size_t start = pos_;
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (pos_ == end_) malformed(start, fmt::format("{} runs past the end of its message (byte {})", what, end_));
      const auto b = static_cast<uint8_t>(file_[pos_++]);
      if (shift == 63 && b > 1) malformed(start, fmt::format("{} does not fit 64 bits", what));
      v |= uint64_t(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
  }
  std::string_view take(size_t n, const Field& f) {
    if (n > end_ - pos_)
      malformed(f.offset, fmt::format("field {} runs past the end of its message (byte {})", f.number, end_));
    const std::string_view out = file_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  std::string_view file_;
  size_t pos_, end_;
  const std::string& path_;
};

// ---------------------------------------------------------------------------------------------
// The normalization table: "<u32 trie size><trie: a darts-clone double array of u32 units><rule
// outputs, each ending in NUL>". The library follows the trie for each prefix of the text with
// no bounds check and copies the output a leaf's value points at up to its NUL, into a result
// array of 32 matches. So every unit reachable from the root must lie inside the trie, every
// value inside the outputs and before a NUL, and no path may hold more than 32 leaves (nor any
// cycle, which no built trie has).

constexpr int kMaxMatches = 32;  // Normalizer::kMaxTrieResultsSize

struct Unit {
  uint32_t u;
  bool has_leaf() const { return (u >> 8) & 1; }
  uint32_t value() const { return u & ((1U << 31) - 1); }
  uint32_t label() const { return u & ((1U << 31) | 0xFF); }
  uint32_t offset() const { return (u >> 10) << ((u & (1U << 9)) >> 6); }
};

void check_charsmap(std::string_view blob, size_t offset, std::string_view spec, const std::string& path) {
  if (blob.empty()) return;  // no table: the text is left as it is
  const auto fault = [&](size_t at, std::string_view what) {
    input_error("{}: byte {}: normalization table of {}: {}", path, offset + at, spec, what);
  };
  if (blob.size() < 4) fault(0, "shorter than its header");
  const uint32_t trie_size = load_unaligned<uint32_t>(blob.data());
  if (trie_size == 0 || trie_size % 4 != 0 || trie_size > blob.size() - 4)
    fault(0, fmt::format("a trie of {} bytes does not fit the {} bytes after the header", trie_size, blob.size() - 4));
  const char* trie = blob.data() + 4;
  const size_t units = trie_size / 4;
  const std::string_view outputs = blob.substr(4 + trie_size);
  const size_t last_nul = outputs.rfind('\0');
  const auto unit = [&](size_t i) { return Unit{load_unaligned<uint32_t>(trie + 4 * i)}; };
  const auto unit_at = [&](size_t i) { return 4 + 4 * i; };

  // Depth-first over the trie's nodes, each named by the base its children are found from (the
  // child of label c at base ^ c), each walked once: LEAVES holds the most leaves on a path below.
  enum : uint8_t { kNew, kOpen, kDone };
  std::vector<uint8_t> state(units, kNew), leaves(units, 0);
  struct Frame {
    size_t base;
    int label;  // the next label to try
    int leaves;  // the most leaves on a path below, so far
  };
  const size_t root = unit(0).offset();
  if ((root | 0xFF) >= units) fault(unit_at(0), "the root leads outside the trie");
  std::vector<Frame> stack = {{root, 0, 0}};
  state[root] = kOpen;
  while (!stack.empty()) {
    Frame& top = stack.back();
    if (top.label > 0xFF) {
      state[top.base] = kDone;
      leaves[top.base] = static_cast<uint8_t>(top.leaves);
      stack.pop_back();
      // The parent tries that label again, which now finds the node walked and counts its leaves.
      if (!stack.empty()) --stack.back().label;
      continue;
    }
    const int c = top.label++;
    const size_t at = top.base ^ static_cast<size_t>(c);
    const Unit u = unit(at);
    if (u.label() != static_cast<uint32_t>(c)) continue;
    const size_t child = at ^ u.offset();
    if ((child | 0xFF) >= units) fault(unit_at(at), "a unit leads outside the trie");
    const int leaf = u.has_leaf() ? 1 : 0;
    if (leaf && (last_nul == std::string_view::npos || unit(child).value() > last_nul))
      fault(unit_at(child), fmt::format("a rule's output at {} is not inside the {} bytes of outputs",
                                        unit(child).value(), outputs.size()));
    if (state[child] == kOpen) fault(unit_at(at), "the trie has a cycle");
    if (state[child] == kNew) {
      state[child] = kOpen;
      stack.push_back({child, 0, 0});
      continue;
    }
    top.leaves = std::max(top.leaves, leaf + leaves[child]);
    if (top.leaves > kMaxMatches) fault(unit_at(at), fmt::format("more than {} rules match one prefix", kMaxMatches));
  }
}

// ---------------------------------------------------------------------------------------------
// The messages of ModelProto, and what the library would misuse in each.

// A TrainerSpec id field and where it was read, for the checks that need every piece first.
struct IdField {
  int32_t id;
  size_t offset = 0;  // 0: absent, the proto's default
};

struct Spec {
  IdField unk{0}, bos{1}, eos{2}, pad{-1};
  size_t byte_fallback_at = 0;
  bool has_trainer = false, has_normalizer = false;
};

void read_piece(Message m, size_t index, Model::Piece& p, const std::string& path) {
  for (Field f; m.next(f);) {
    if (f.number == 1) p.text = m.bytes(f, "SentencePiece.piece");
    if (f.number == 2) {
      m.expect(f, kFixed32, "SentencePiece.score");
      p.score = std::bit_cast<float>(static_cast<uint32_t>(f.value));
    }
    if (f.number == 3) {
      const int32_t type = m.int32(f, "SentencePiece.type");
      if (type < Model::kNormal || type > Model::kByte)
        input_error("{}: piece {}: type {} is not a SentencePiece type (1 to 6)", path, index, type);
      p.type = type;
    }
  }
  size_t bad = 0;
  if (p.text.empty()) input_error("{}: piece {}: empty", path, index);
  if (!valid_utf8(p.text, &bad)) input_error("{}: piece {}: invalid UTF-8 at byte {} of the piece", path, index, bad);
  // The library hands its tries the pieces as C strings, so a NUL would cut a piece short: an
  // empty or out-of-order key, which its trie builder throws on.
  if (const size_t nul = p.text.find('\0'); nul != std::string_view::npos)
    input_error("{}: piece {}: a NUL at byte {} of the piece", path, index, nul);
  if (!std::isfinite(p.score)) input_error("{}: piece {}: score {} is not a finite number", path, index, p.score);
}

void read_trainer_spec(Message m, Model& model, Spec& spec, const std::string& path) {
  for (Field f; m.next(f);) {
    switch (f.number) {
      case 3:
        model.model_type = m.int32(f, "TrainerSpec.model_type");
        if (model.model_type < Model::kUnigram || model.model_type > Model::kChar)
          input_error("{}: byte {}: model type {} is none of unigram (1), BPE (2), word (3), char (4)", path,
                      f.offset, model.model_type);
        break;
      case 24: model.whitespace_as_suffix = m.boolean(f, "TrainerSpec.treat_whitespace_as_suffix"); break;
      case 35:
        model.byte_fallback = m.boolean(f, "TrainerSpec.byte_fallback");
        spec.byte_fallback_at = f.offset;
        break;
      case 40: spec.unk = {m.int32(f, "TrainerSpec.unk_id"), f.offset}; break;
      case 41: spec.bos = {m.int32(f, "TrainerSpec.bos_id"), f.offset}; break;
      case 42: spec.eos = {m.int32(f, "TrainerSpec.eos_id"), f.offset}; break;
      case 43: spec.pad = {m.int32(f, "TrainerSpec.pad_id"), f.offset}; break;
      default: break;  // the library reads the rest only to train
    }
  }
}

void read_normalizer_spec(Message m, Model::Normalizer& n, std::string_view spec,
                          const std::string& path) {
  for (Field f; m.next(f);) {
    switch (f.number) {
      case 1: n.name = m.bytes(f, "NormalizerSpec.name"); break;
      case 2:
        n.charsmap = m.bytes(f, "NormalizerSpec.precompiled_charsmap");
        check_charsmap(n.charsmap, f.bytes_offset, spec, path);
        break;
      case 3: n.add_dummy_prefix = m.boolean(f, "NormalizerSpec.add_dummy_prefix"); break;
      case 4: n.remove_extra_whitespaces = m.boolean(f, "NormalizerSpec.remove_extra_whitespaces"); break;
      case 5: n.escape_whitespaces = m.boolean(f, "NormalizerSpec.escape_whitespaces"); break;
      case 6: m.bytes(f, "NormalizerSpec.normalization_rule_tsv"); break;
      default: break;
    }
  }
}

// SelfTestData: samples of (input, expected) the library encodes at load, refusing the model if
// one differs. Only its structure is checked here.
void read_self_test(Message m) {
  for (Field f; m.next(f);) {
    if (f.number != 1) continue;
    Message sample = m.nested(f, "SelfTestData.samples");
    for (Field s; sample.next(s);)
      if (s.number == 1 || s.number == 2) sample.bytes(s, "SelfTestData.Sample");
  }
}

std::string quoted(std::string_view piece) { return fmt::format("{:?}", piece); }

// The byte a BYTE piece stands for: its text is "<0xHH>", in upper case as the library spells it;
// -1 for any other text.
int byte_of_piece(std::string_view text) {
  const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>' || hex(text[3]) < 0 || hex(text[4]) < 0)
    return -1;
  return hex(text[3]) * 16 + hex(text[4]);
}

// What the library checks when it builds its model (model_interface.cc), and the ids it hands out.
void check_pieces(const Model& model, const Spec& spec, size_t end, const std::string& path) {
  const size_t n = model.pieces.size();
  if (n == 0) input_error("{}: byte {}: the model has no pieces", path, end);
  // The library looks NORMAL, USER_DEFINED and UNUSED pieces up in one map, the rest in another;
  // a text may be in each once.
  std::unordered_map<std::string_view, size_t> mergeable, reserved;
  std::vector<bool> bytes_found(256, false);
  size_t unk = n;
  for (size_t i = 0; i < n; ++i) {
    const Model::Piece& p = model.pieces[i];
    const bool normal = p.type == Model::kNormal || p.type == Model::kUserDefined || p.type == Model::kUnused;
    const auto [it, fresh] = (normal ? mergeable : reserved).emplace(p.text, i);
    if (!fresh) input_error("{}: piece {}: {} is piece {} already", path, i, quoted(p.text), it->second);
    if (p.type == Model::kUnknown) {
      if (unk < n) input_error("{}: piece {}: a second UNKNOWN piece (piece {} is one)", path, i, unk);
      unk = i;
    }
    if (p.type == Model::kByte) {
      if (!model.byte_fallback) input_error("{}: piece {}: a BYTE piece, but byte_fallback is off", path, i);
      const int value = byte_of_piece(p.text);
      if (value < 0) input_error("{}: piece {}: BYTE piece {} is none of <0x00> to <0xFF>", path, i, quoted(p.text));
      bytes_found[value] = true;
    }
  }
  // Where the library's encoder gives its segments their ids by text (all but unigram models), a
  // CONTROL piece of a segment's text takes its place; a CONTROL piece stands for no text, so the
  // library then fails on the whole text. Segments are single characters (BPE, char) and the
  // other pieces' texts.
  if (model.model_type != Model::kUnigram) {
    for (size_t i = 0; i < n; ++i) {
      const Model::Piece& p = model.pieces[i];
      if (p.type != Model::kControl) continue;
      if (const auto it = mergeable.find(p.text); it != mergeable.end())
        input_error("{}: piece {}: CONTROL piece {} is piece {} too: the library fails on a text segmented into it",
                    path, i, quoted(p.text), it->second);
      size_t len = 0;
      next_code_point(reinterpret_cast<const uint8_t*>(p.text.data()), p.text.size(), 0, &len);
      if (model.model_type != Model::kWord && len == p.text.size())
        input_error("{}: piece {}: CONTROL piece {} is a single character: the library fails on a text that holds it",
                    path, i, quoted(p.text));
    }
  }
  const auto in_range = [&](const IdField& id, std::string_view name, bool optional) {
    if ((optional && id.id == -1) || (id.id >= 0 && std::cmp_less(id.id, n))) return;
    input_error("{}: byte {}: {} {} is not {}a piece of the {}", path, id.offset, name, id.id,
                optional ? "-1 (none) or " : "", n);
  };
  in_range(spec.unk, "unk_id", false);
  if (model.pieces[spec.unk.id].type != Model::kUnknown)
    input_error("{}: piece {}: unk_id names it, but {}", path, spec.unk.id,
                unk < n ? fmt::format("piece {} is the UNKNOWN piece", unk) : std::string("its type is not UNKNOWN"));
  in_range(spec.bos, "bos_id", true);
  in_range(spec.eos, "eos_id", true);
  in_range(spec.pad, "pad_id", true);
  if (model.byte_fallback)
    for (unsigned b = 0; b < 256; ++b)
      if (!bytes_found[b])
        input_error("{}: byte {}: byte_fallback is on, but no piece is <0x{:02X}>", path, spec.byte_fallback_at, b);
}

}  // namespace

SentencePieceModel read_sentencepiece_model(std::string_view bytes, const std::string& path) {
  Model model;
  Spec spec;
  Model::Normalizer denormalizer;
  Message m(bytes, 0, bytes.size(), path);
  // Fields repeat as protobuf allows: a repeated message field appends, a repeated scalar replaces,
  // a repeated message merges into what came before.
  for (Field f; m.next(f);) {
    switch (f.number) {
      case 1: {
        const size_t index = model.pieces.size();
        if (index == kMaxSentencePieces)
          input_error("{}: byte {}: more than {} pieces", path, f.offset, kMaxSentencePieces);
        read_piece(m.nested(f, "ModelProto.pieces"), index, model.pieces.emplace_back(), path);
        break;
      }
      case 2:
        read_trainer_spec(m.nested(f, "ModelProto.trainer_spec"), model, spec, path);
        spec.has_trainer = true;
        break;
      case 3:
        read_normalizer_spec(m.nested(f, "ModelProto.normalizer_spec"), model.normalizer, "normalizer_spec", path);
        spec.has_normalizer = true;
        break;
      case 4: read_self_test(m.nested(f, "ModelProto.self_test_data")); break;
      case 5:
        read_normalizer_spec(m.nested(f, "ModelProto.denormalizer_spec"), denormalizer, "denormalizer_spec", path);
        break;
      default: break;  // extensions
    }
  }
  // The fields come in order (pieces, trainer_spec, normalizer_spec, ...), so a model cut short
  // between two of them would parse as a smaller one: every model has the two specs.
  if (!spec.has_trainer) input_error("{}: byte {}: the model ends without its trainer_spec", path, bytes.size());
  if (!spec.has_normalizer) input_error("{}: byte {}: the model ends without its normalizer_spec", path, bytes.size());
  check_pieces(model, spec, bytes.size(), path);
  return model;
}

}  // namespace meg
