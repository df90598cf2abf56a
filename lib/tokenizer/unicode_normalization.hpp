// Unicode normalization forms (UAX #15) and the full lowercase mapping, as Hugging Face tokenizers'
// normalizers NFC, NFD, NFKC, NFKD and Lowercase apply them.
//
// A normalization form decomposes every code point fully (canonical mappings for NFD/NFC, also
// compatibility ones for NFKD/NFKC; Hangul syllables by the standard's arithmetic), puts each run
// of non-starters in the order of their canonical combining classes (stable), and for NFC/NFKC
// composes again: each code point joins the last starter before it when the pair is a primary
// composite and nothing between blocks it (a starter, or a mark of the same or a higher class).
// Most text is normalized already, so runs of ASCII and of other code points that are stable
// boundaries of the form (see scripts/gen-unicode-normalization.py) are copied as they are, and
// only what lies between them is decomposed and recomposed.
//
// Lowercase maps each code point alone by its full lowercase mapping (UnicodeData and the
// unconditional part of SpecialCasing), as Rust's char::to_lowercase, which HF's Lowercase
// normalizer applies: no context, so U+03A3 is always U+03C3, never the final U+03C2.
//
// The data are Unicode 14.0 (unicode_normalization_version()). Text is UTF-8; a byte that does not start a
// complete sequence (meg validates text before it gets here) is passed through as it is. Both
// functions are pure and safe to call from any number of threads.
#pragma once

#include <string>
#include <string_view>

namespace meg {

enum class NormalizationForm { kNFC, kNFD, kNFKC, kNFKD };

std::string normalize(std::string_view utf8, NormalizationForm form);
std::string lowercase(std::string_view utf8);

const char* unicode_normalization_version();  // of the data: "14.0.0"

}  // namespace meg
