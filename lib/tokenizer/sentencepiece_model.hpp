// A SentencePiece model file (a serialized ModelProto of sentencepiece_model.proto), read and
// checked without the protobuf library before libsentencepiece is given it.
//
// The library parses whatever the wire format allows and then trusts the result: a normalization
// table whose trie points outside itself makes it read past the end of the model, more than 32
// rules matching one prefix overrun an array on its stack, a model type it does not know leaves it
// without a model, a NaN score breaks the ordering of its BPE queue. So everything that it would
// misuse is refused here, in one line naming the byte or the piece at fault.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meg {

struct SentencePieceModel {
  // ModelProto.SentencePiece.Type and TrainerSpec.ModelType.
  enum PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  enum ModelType { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

  struct Piece {
    std::string_view text;
    float score = 0;
    int type = kNormal;
  };
  // NormalizerSpec: how text is normalized before it is segmented (or after it is decoded).
  struct Normalizer {
    std::string_view name;
    std::string_view charsmap;  // precompiled_charsmap: the compiled normalization table
    std::string_view rules;  // normalization_rule_tsv: custom rules the table was compiled from
    bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
  };

  std::vector<Piece> pieces;  // by id; views into the model's bytes
  // TrainerSpec, with the proto's defaults: what decides how text is segmented. (Its ids are
  // checked; the library finds the pieces they name by type and text.)
  int model_type = kUnigram;
  bool byte_fallback = false, whitespace_as_suffix = false;
  Normalizer normalizer;
};

// U+2581, which SentencePiece writes for a space (before a word, unless the model puts it after).
inline constexpr std::string_view kSentencePieceSpace = "\xe2\x96\x81";

// More pieces than any real vocabulary holds (the largest have about 256K): a bound on what a
// model file may make meg and the library allocate.
inline constexpr size_t kMaxSentencePieces = size_t(1) << 24;

// Parses BYTES, the contents of the model file PATH, and checks everything the library relies on;
// InputError "PATH: byte OFFSET: ..." or "PATH: piece N: ..." at the first fault.
SentencePieceModel read_sentencepiece_model(std::string_view bytes, const std::string& path);

}  // namespace meg
