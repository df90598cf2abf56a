// Writing SentencePiece models (ModelProto of sentencepiece_model.proto) field by field in the
// protobuf wire format, for the tests of models no trainer would make.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

namespace meg {

inline std::string proto_varint(uint64_t v) {
  std::string out;
  for (; v >= 0x80; v >>= 7) out += static_cast<char>(v | 0x80);
  return out + static_cast<char>(v);
}
inline std::string proto_bytes(int field, std::string_view bytes) {
  return proto_varint(field << 3 | 2) + proto_varint(bytes.size()) + std::string(bytes);
}
// An int32, enum or bool field; negative values go sign-extended, as protobuf writes them.
inline std::string proto_int(int field, int64_t v) {
  return proto_varint(field << 3) + proto_varint(static_cast<uint64_t>(v));
}
inline std::string proto_float(int field, float v) {
  const auto bits = std::bit_cast<uint32_t>(v);
  std::string out = proto_varint(field << 3 | 5);
  for (int i = 0; i < 4; ++i) out += static_cast<char>(bits >> (8 * i));
  return out;
}
// ModelProto.pieces: one SentencePiece {piece, score, type}.
inline std::string proto_piece(std::string_view text, float score, int type) {
  return proto_bytes(1, proto_bytes(1, text) + proto_float(2, score) + proto_int(3, type));
}

}  // namespace meg
