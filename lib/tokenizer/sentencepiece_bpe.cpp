#include "tokenizer/sentencepiece_bpe.hpp"

#include <bit>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace meg {

namespace {

constexpr uint64_t kEmpty = ~0ULL;  // ids are below 2^31, so no pair has this key
constexpr float kNoScore = -std::numeric_limits<float>::infinity();  // of a pair that makes no piece

// Longer words go to the library: the merge loop below rescans the word after each merge, which
// beats the library's heap on the short words of text but not on a long run without spaces.
constexpr size_t kMaxWord = 256;

// Texts that "\u2581" + a printable ASCII word can be cut into: the only pieces this path can meet.
bool reachable(std::string_view text) {
  if (text.starts_with(kSentencePieceSpace)) text.remove_prefix(kSentencePieceSpace.size());
  for (const char c : text)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}

uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

}  // namespace

std::unique_ptr<SentencePieceBpe> SentencePieceBpe::build(std::span<const Piece> pieces) {
  auto bpe = std::make_unique<SentencePieceBpe>();
  // The library merges into NORMAL, USER_DEFINED and UNUSED pieces; the others are "reserved", and
  // its piece-to-id lookup tries the reserved ones first.
  std::unordered_map<std::string_view, int32_t> mergeable;
  std::unordered_set<std::string_view> reserved;
  bpe->unused_.assign(pieces.size(), false);
  for (size_t id = 0; id < pieces.size(); ++id) {
    const Piece& p = pieces[id];
    if (p.type == SentencePieceModel::kUserDefined) return nullptr;
    bpe->unused_[id] = p.type == SentencePieceModel::kUnused;
    if (p.type == SentencePieceModel::kNormal || p.type == SentencePieceModel::kUnused) {
      if (!reachable(p.text)) continue;
      mergeable.emplace(p.text, static_cast<int32_t>(id));
    } else {
      reserved.insert(p.text);
    }
  }
  for (const auto& [text, id] : mergeable)
    if (reserved.contains(text)) return nullptr;

  const auto normal_id = [&](std::string_view text) {
    const auto it = mergeable.find(text);
    return it != mergeable.end() && pieces[it->second].type == SentencePieceModel::kNormal ? it->second : -1;
  };
  bpe->char_ids_[0] = normal_id(kSentencePieceSpace);
  if (bpe->char_ids_[0] < 0) return nullptr;
  for (int c = 1; c < kChars; ++c) {
    const char ch = static_cast<char>(0x20 + c);
    bpe->char_ids_[c] = normal_id(std::string_view(&ch, 1));
  }

  // Every way to cut each piece in two mergeable pieces: the pairs of symbols that merge into it.
  std::vector<std::pair<uint64_t, Merge>> pairs;
  for (const auto& [text, id] : mergeable) {
    for (size_t cut = 1; cut < text.size(); ++cut) {
      const auto left = mergeable.find(text.substr(0, cut));
      const auto right = mergeable.find(text.substr(cut));
      if (left != mergeable.end() && right != mergeable.end())
        pairs.push_back({pair_key(left->second, right->second), {id, pieces[id].score}});
    }
  }
  size_t cap = 16;
  while (cap < 2 * pairs.size()) cap *= 2;
  bpe->slots_.assign(cap, Slot{kEmpty, {-1, kNoScore}});
  bpe->shift_ = 64 - std::countr_zero(cap);
  for (const auto& [key, merge] : pairs) {
    size_t i = (key * 0x9E3779B97F4A7C15ULL) >> bpe->shift_;
    while (bpe->slots_[i].key != kEmpty) i = (i + 1) & (cap - 1);  // each key comes once: one text
    bpe->slots_[i] = {key, merge};
  }
  for (int a = 0; a < kChars; ++a) {
    for (int b = 0; b < kChars; ++b) {
      const int32_t left = bpe->char_ids_[a], right = bpe->char_ids_[b];
      bpe->char_pairs_[a * kChars + b] = left >= 0 && right >= 0 ? bpe->find(left, right) : Merge{-1, kNoScore};
    }
  }
  return bpe;
}

SentencePieceBpe::Merge SentencePieceBpe::find(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (size_t i = (key * 0x9E3779B97F4A7C15ULL) >> shift_;; i = (i + 1) & (slots_.size() - 1)) {
    if (slots_[i].key == key) return slots_[i].merge;
    if (slots_[i].key == kEmpty) return {-1, kNoScore};
  }
}

// The library's BPE: one symbol per character; while some adjacent pair of symbols makes a piece,
// merge the pair whose piece scores highest, the leftmost among equals. The library keeps the pairs
// in a heap and skips the stale ones; a scan over the current pairs picks the same one each step.
bool SentencePieceBpe::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty() || word.size() > kMaxWord) return false;
  int32_t symbols[kMaxWord + 1];
  Merge pairs[kMaxWord];  // pairs[i]: what symbols i and i + 1 make
  symbols[0] = char_ids_[0];
  int prev = 0;
  for (size_t i = 0; i < word.size(); ++i) {
    const int c = static_cast<uint8_t>(word[i]) - 0x20;
    if (c <= 0 || c >= kChars || char_ids_[c] < 0) return false;
    symbols[i + 1] = char_ids_[c];
    pairs[i] = char_pairs_[prev * kChars + c];
    prev = c;
  }
  size_t n = word.size() + 1;

  for (;;) {
    size_t best = n;
    float best_score = kNoScore;
    for (size_t i = 0; i + 1 < n; ++i)
      if (pairs[i].score > best_score) best_score = pairs[i].score, best = i;
    if (best == n) break;
    symbols[best] = pairs[best].merged;
    --n;
    for (size_t i = best + 1; i < n; ++i) symbols[i] = symbols[i + 1];
    for (size_t i = best; i + 1 < n; ++i) pairs[i] = pairs[i + 1];
    if (best > 0) pairs[best - 1] = find(symbols[best - 1], symbols[best]);
    if (best + 1 < n) pairs[best] = find(symbols[best], symbols[best + 1]);
  }

  for (size_t i = 0; i < n; ++i)
    if (unused_[symbols[i]]) return false;
  out.insert(out.end(), symbols, symbols + n);
  return true;
}

}  // namespace meg
