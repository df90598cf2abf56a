// The checks of SentencePiece model files: real models pass, and each fault the library would
// misuse is refused in one line naming the byte or the piece.
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "catch.hpp"
#include "tokenizer/sentencepiece_model.hpp"
#include "tokenizer/sentencepiece_tokenizer.hpp"
#include "spm_proto.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::StartsWith;

namespace {
using M = SentencePieceModel;

const std::string kBasePieces = proto_piece("<unk>", 0, M::kUnknown) + proto_piece("<s>", 0, M::kControl) +
                                proto_piece("</s>", 0, M::kControl) + proto_piece("\u2581", -1, M::kNormal) +
                                proto_piece("a", -2, M::kNormal) + proto_piece("b", -3, M::kNormal) +
                                proto_piece("\u2581a", -4, M::kNormal);
const std::string kBpe = proto_int(3, M::kBpe);
const std::string kIdentity = proto_bytes(1, "identity");

std::string model(const std::string& pieces = kBasePieces, const std::string& trainer = kBpe,
                  const std::string& normalizer = kIdentity) {
  return pieces + proto_bytes(2, trainer) + proto_bytes(3, normalizer);
}

// A normalization table of RULES (key -> output) in darts-clone's layout: the root unit at 0, then
// a block of 256 units per node, each child at base ^ label, the leaf value of a node at its
// base, unused units labelled so that no lookup matches them (as the builder leaves them).
std::string charsmap(const std::map<std::string, std::string>& rules) {
  std::map<std::string, int> nodes = {{"", 0}};  // every prefix of a key, by node number
  for (const auto& [key, out] : rules)
    for (size_t i = 1; i <= key.size(); ++i) nodes.emplace(key.substr(0, i), 0);
  int next = 0;
  for (auto& [prefix, id] : nodes) id = next++;
  const auto base = [](int node) { return uint32_t(256 * (node + 1)); };
  std::vector<uint32_t> units(256 * (nodes.size() + 1));
  for (size_t q = 256; q < units.size(); ++q) units[q] = ((q & 0xFF) ^ 1) & 0xFF;
  units[0] = base(0) << 10;
  std::string outputs;
  for (const auto& [prefix, id] : nodes) {
    if (prefix.empty()) continue;
    const uint32_t parent = base(nodes[prefix.substr(0, prefix.size() - 1)]);
    const auto label = static_cast<uint8_t>(prefix.back());
    const uint32_t at = parent ^ label;
    const auto rule = rules.find(prefix);
    units[at] = (at ^ base(id)) << 10 | (rule != rules.end() ? 1U << 8 : 0) | label;
    if (rule != rules.end()) {
      units[base(id)] = 1U << 31 | uint32_t(outputs.size());
      outputs += rule->second + '\0';
    }
  }
  std::string blob(4 + 4 * units.size(), '\0');
  const auto trie_size = uint32_t(4 * units.size());
  std::memcpy(blob.data(), &trie_size, 4);
  std::memcpy(blob.data() + 4, units.data(), trie_size);
  return blob + outputs;
}

std::string with_charsmap(const std::string& table) { return model(kBasePieces, kBpe, proto_bytes(2, table)); }

// Unit I of the trie of TABLE, to corrupt it.
uint32_t& unit(std::string& table, size_t i) { return *reinterpret_cast<uint32_t*>(table.data() + 4 + 4 * i); }

void refused(const std::string& bytes, const std::string& message) {
  CHECK_THROWS_WITH(read_sentencepiece_model(bytes, "m.model"), StartsWith("m.model: ") && ContainsSubstring(message));
}
}  // namespace

TEST_CASE("SentencePiece models that trainers make pass the checks", "[spm]") {
  const std::string bytes = read_file(std::string(MEG_TEST_DATA) + "/megatron/fortunes_spm.model");
  const M m = read_sentencepiece_model(bytes, "fortunes_spm.model");
  CHECK(m.pieces.size() == 2000);
  CHECK(m.model_type == M::kBpe);
  CHECK(m.pieces[0].type == M::kUnknown);
  CHECK(m.pieces[0].text == "<unk>");
  CHECK(m.normalizer.name == "nmt_nfkc");
  CHECK(m.normalizer.charsmap.size() > 200000);

  const std::string small_bytes = model();  // the model's pieces are views of its bytes
  const M small = read_sentencepiece_model(small_bytes, "m.model");
  CHECK(small.pieces.size() == 7);
  CHECK(small.pieces[6].text == "\u2581a");
  CHECK(small.pieces[6].score == -4);
  // What protobuf allows passes: unknown fields, a repeated spec merging into the first, the same
  // text as a reserved and as a mergeable piece (the library keeps them in two maps).
  CHECK_NOTHROW(read_sentencepiece_model(model() + proto_bytes(99, "x"), "m.model"));
  refused(model() + proto_bytes(2, proto_int(42, 70)), "eos_id 70 is not -1 (none) or a piece of the 7");
  CHECK_NOTHROW(read_sentencepiece_model(
      model(kBasePieces + proto_piece("</s>", 0, M::kUnused), proto_int(3, M::kUnigram)), "m.model"));
}

TEST_CASE("SentencePiece models are refused where the wire format breaks", "[spm]") {
  const std::string good = model();
  refused(good.substr(0, good.size() - 3), "byte 102: not a SentencePiece model: field 3 of 10 bytes runs past");
  refused(good + "\x80", "byte 114: not a SentencePiece model: field key runs past the end");
  refused(good + proto_varint(8) + "\xff\xff", "byte 115: not a SentencePiece model: varint runs past");
  refused(good + "\x0b", "field 1 has wire type 3, which is not used");
  refused(good + "\x07", "field number 0 is not a protobuf field number");
  refused(good + proto_varint(5 << 3 | 5) + "ab", "field 5 runs past the end of its message");
  refused(good + proto_varint(8) + std::string(9, '\xff') + "\x7f", "varint does not fit 64 bits");
  refused(model(kBasePieces + proto_int(1, 7)), "ModelProto.pieces (field 1) has wire type 0, not 2");
  refused(model(kBasePieces + proto_bytes(1, proto_bytes(1, "x") + proto_int(2, 1))),
          "SentencePiece.score (field 2) has wire type 0, not 5");
  refused(model(kBasePieces, kBpe + proto_int(40, int64_t(1) << 32)), "TrainerSpec.unk_id (field 40) of 4294967296 does not fit 32 bits");
  refused(kBasePieces + proto_bytes(3, kIdentity), "the model ends without its trainer_spec");
  refused(kBasePieces + proto_bytes(2, kBpe), "the model ends without its normalizer_spec");
}

TEST_CASE("SentencePiece models are refused for pieces the library would misuse", "[spm]") {
  const auto with = [](const std::string& piece) { return model(kBasePieces + piece); };
  refused(with(proto_piece("", 0, M::kNormal)), "piece 7: empty");
  refused(with(proto_piece("a\xff", 0, M::kNormal)), "piece 7: invalid UTF-8 at byte 1 of the piece");
  // The library's tries take pieces as C strings: "\0x" would be an empty key, "a\0" a second "a".
  refused(with(proto_piece(std::string("\0x", 2), 0, M::kNormal)), "piece 7: a NUL at byte 0 of the piece");
  refused(with(proto_piece(std::string("a\0", 2), 0, M::kUserDefined)), "piece 7: a NUL at byte 1 of the piece");
  refused(with(proto_piece("x", std::nanf(""), M::kNormal)), "piece 7: score nan is not a finite number");
  refused(with(proto_piece("x", -std::numeric_limits<float>::infinity(), M::kNormal)), "piece 7: score -inf");
  refused(with(proto_piece("x", 0, 9)), "piece 7: type 9 is not a SentencePiece type (1 to 6)");
  refused(with(proto_piece("x", 0, 0)), "piece 7: type 0 is not");
  refused(with(proto_piece("b", -5, M::kUnused)), "piece 7: \"b\" is piece 5 already");
  refused(with(proto_piece("<unk2>", 0, M::kUnknown)), "piece 7: a second UNKNOWN piece (piece 0 is one)");
  refused(with(proto_piece("<0x41>", 0, M::kByte)), "piece 7: a BYTE piece, but byte_fallback is off");
  refused(model(kBasePieces + proto_piece("<0x4g>", 0, M::kByte), kBpe + proto_int(35, 1)),
          "piece 7: BYTE piece \"<0x4g>\" is none of <0x00> to <0xFF>");
  refused(model(kBasePieces + proto_piece("<0x41>", 0, M::kByte), kBpe + proto_int(35, 1)),
          "byte_fallback is on, but no piece is <0x00>");
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += proto_piece(fmt::format("<0x{:02X}>", b), 0, M::kByte);
  CHECK(read_sentencepiece_model(model(kBasePieces + all_bytes, kBpe + proto_int(35, 1)), "m.model").byte_fallback);

  // A CONTROL piece where BPE would give out a segment of the same text.
  refused(with(proto_piece("c", 0, M::kControl)), "piece 7: CONTROL piece \"c\" is a single character");
  refused(with(proto_piece("\u2581a", 0, M::kControl)), "piece 7: CONTROL piece \"\u2581a\" is piece 6 too");
  CHECK_NOTHROW(read_sentencepiece_model(model(kBasePieces + proto_piece("c", 0, M::kControl), proto_int(3, M::kUnigram)),
                                         "m.model"));
  // A piece's text with a line break stays on the error's one line.
  refused(with(proto_piece("a\nb", 0, M::kNormal) + proto_piece("a\nb", 0, M::kNormal)), "piece 8: \"a\\nb\" is piece 7 already");
}

TEST_CASE("SentencePiece models are refused for ids and types out of range", "[spm]") {
  refused(model(kBasePieces, kBpe + proto_int(3, 7)), "model type 7 is none of unigram (1), BPE (2), word (3), char (4)");
  refused(model(kBasePieces, kBpe + proto_int(40, 7)), "unk_id 7 is not a piece of the 7");
  refused(model(kBasePieces, kBpe + proto_int(40, -1)), "unk_id -1 is not a piece of the 7");
  refused(model(kBasePieces, kBpe + proto_int(40, 1)), "piece 1: unk_id names it, but piece 0 is the UNKNOWN piece");
  refused(model(proto_piece("<s>", 0, M::kControl) + proto_piece("a", 0, M::kNormal)), "piece 0: unk_id names it, but its type is not UNKNOWN");
  refused(model(kBasePieces, kBpe + proto_int(41, 70)), "bos_id 70 is not -1 (none) or a piece of the 7");
  refused(model(kBasePieces, kBpe + proto_int(42, -2)), "eos_id -2 is not -1 (none) or a piece of the 7");
  refused(model(kBasePieces, kBpe + proto_int(43, 7)), "pad_id 7 is not");
  refused(model(""), "the model has no pieces");
  CHECK_NOTHROW(read_sentencepiece_model(model(kBasePieces, kBpe + proto_int(43, 3) + proto_int(41, -1)), "m.model"));
}

TEST_CASE("SentencePiece normalization tables are walked before the library trusts them", "[spm]") {
  std::string table = charsmap({{"a", "b"}, {"ab", "c"}});
  REQUIRE_NOTHROW(read_sentencepiece_model(with_charsmap(table), "m.model"));
  // The library reads the table as this test lays it out: "a" normalizes to "b".
  TempDir dir;
  write_file(dir.path("m.model"), with_charsmap(table));
  const SentencePieceTokenizer spm(dir.path("m.model"));
  std::vector<int32_t> a, b;
  spm.encode_whole("a", a);
  spm.encode_whole("b", b);
  CHECK(a == b);

  const std::string intact = table;
  const auto refused_table = [&](const std::string& message) {
    refused(with_charsmap(table), "normalization table of normalizer_spec: " + message);
    table = intact;
  };
  table.resize(3);
  refused_table("shorter than its header");
  table[0] = '\x08';
  refused_table("a trie of 4104 bytes does not fit");
  table.resize(table.size() - 1);  // the last output without its NUL
  refused_table("a rule's output at 2 is not inside the 3 bytes of outputs");
  unit(table, 256 ^ 'a') ^= 0x1000 << 10;  // the child of "a" moved past the end
  refused_table("a unit leads outside the trie");
  unit(table, 512 ^ 'b') = ((512 ^ 'b') ^ 256) << 10 | 'b';  // "ab" leads back to the root
  refused_table("the trie has a cycle");
  unit(table, 0) = 0x7fffff << 10;
  refused_table("the root leads outside the trie");

  // 33 rules along one key would overrun the library's 32 results for a prefix.
  std::map<std::string, std::string> chain;
  for (int n = 1; n <= 33; ++n) chain[std::string(n, 'a')] = "x";
  refused(with_charsmap(charsmap(chain)), "more than 32 rules match one prefix");
  chain.erase(std::string(33, 'a'));
  CHECK_NOTHROW(read_sentencepiece_model(with_charsmap(charsmap(chain)), "m.model"));
  // The denormalizer's table is checked too.
  refused(model() + proto_bytes(5, proto_bytes(2, "abc")), "normalization table of denormalizer_spec: shorter than its header");
}
