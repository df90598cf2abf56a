#include "tokenizer/regex_set.hpp"

#include <algorithm>
#include <map>

namespace meg::regex {

using unicode::CategoryMask;

CodePointSet CodePointSet::of_categories(CategoryMask categories) {
  CodePointSet s;
  s.categories_ = categories;
  for (uint32_t cp = 0; cp < 256; ++cp)
    if (categories & unicode::bit(unicode::general_category(cp))) s.add(cp);
  return s;
}

CodePointSet CodePointSet::white_space() {
  CodePointSet s;
  s.categories_ = unicode::kSeparatorMask;  // White_Space above Latin-1 (unicode_tables.hpp)
  for (uint32_t cp = 0; cp < 256; ++cp)
    if (unicode::is_white_space(cp)) s.add(cp);
  return s;
}

CodePointSet CodePointSet::word() {
  using unicode::GeneralCategory;
  // Alphabetic is L, Nl and some M, and a few symbols.
  CodePointSet s = of_categories(unicode::kLetterMask | unicode::kMarkMask | unicode::bit(GeneralCategory::Nl) |
                                 unicode::bit(GeneralCategory::Nd) | unicode::bit(GeneralCategory::Pc));
  for (const auto& [first, last] : unicode::alphabetic_symbols()) s.add_range(first, last);
  return s;
}

CodePointSet CodePointSet::any_but_newline() {
  CodePointSet s;
  s.add('\n');
  s.negate();
  return s;
}

void CodePointSet::add_range(uint32_t first, uint32_t last) {
  for (uint32_t cp = first; cp <= std::min(last, 255u); ++cp) latin1_[cp >> 6] |= uint64_t{1} << (cp & 63);
  if (last < 256) return;
  first = std::max(first, 256u);
  // Insert, then merge with the neighbours it overlaps or touches.
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), std::pair{first, 0u});
  it = ranges_.insert(it, {first, last});
  if (it != ranges_.begin() && std::prev(it)->second + 1 >= it->first) {
    std::prev(it)->second = std::max(std::prev(it)->second, it->second);
    it = std::prev(ranges_.erase(it));
  }
  while (std::next(it) != ranges_.end() && it->second + 1 >= std::next(it)->first) {
    it->second = std::max(it->second, std::next(it)->second);
    ranges_.erase(std::next(it));
  }
}

void CodePointSet::add(const CodePointSet& other) {
  for (int i = 0; i < 4; ++i) latin1_[i] |= other.latin1_[i];
  if (!negated_ && !other.negated_) {
    categories_ |= other.categories_;
    for (const auto& [first, last] : other.ranges_) add_range(first, last);
    return;
  }
  // At least one side is "all but these categories (and ranges)". Keep out only the categories
  // that both keep out; drop the ranges (keeping fewer out gives a superset).
  const auto kept_out = [](const CodePointSet& s) -> CategoryMask {
    if (s.negated_) return s.categories_;
    return s.ranges_.empty() ? unicode::kAllCategoriesMask & ~s.categories_ : 0;
  };
  categories_ = kept_out(*this) & kept_out(other);
  ranges_.clear();
  negated_ = true;
}

bool CodePointSet::holds_everything() const {
  for (const uint64_t word : latin1_)
    if (~word) return false;
  return negated_ ? categories_ == 0 && ranges_.empty() : categories_ == unicode::kAllCategoriesMask;
}

bool CodePointSet::disjoint(const CodePointSet& other) const {
  for (int i = 0; i < 4; ++i)
    if (latin1_[i] & other.latin1_[i]) return false;
  return ranges_.empty() && other.ranges_.empty() && !negated_ && !other.negated_ &&
         (categories_ & other.categories_) == 0;
}

void CodePointSet::negate() {
  for (auto& word : latin1_) word = ~word;
  if (ranges_.empty() && !negated_) {
    categories_ = unicode::kAllCategoriesMask & ~categories_;  // exact, and stays a plain set
  } else {
    negated_ = !negated_;
  }
}

namespace {

// The classes of code points that simple case folding makes equal, each of two or more members.
const std::vector<std::vector<uint32_t>>& case_classes() {
  static const auto classes = [] {
    std::map<uint32_t, std::vector<uint32_t>> by_fold;
    for (const auto& f : unicode::simple_case_folds()) by_fold[f.to].push_back(f.from);
    std::vector<std::vector<uint32_t>> out;
    for (auto& [fold, members] : by_fold) {
      members.push_back(fold);
      std::sort(members.begin(), members.end());
      out.push_back(std::move(members));
    }
    return out;
  }();
  return classes;
}

}  // namespace

void CodePointSet::close_over_case() {
  const CodePointSet before = *this;
  for (const auto& members : case_classes())
    if (std::any_of(members.begin(), members.end(), [&](uint32_t cp) { return before.contains(cp); }))
      for (const uint32_t cp : members) add(cp);
}

std::vector<uint32_t> CodePointSet::case_variants(uint32_t cp) {
  const uint32_t fold = unicode::simple_case_fold(cp);
  for (const auto& members : case_classes())
    if (std::binary_search(members.begin(), members.end(), fold)) return members;
  return {cp};
}

bool CodePointSet::in_ranges(uint32_t cp) const {
  const auto it = std::upper_bound(ranges_.begin(), ranges_.end(), std::pair{cp, ~0u});
  return it != ranges_.begin() && std::prev(it)->second >= cp;
}

}  // namespace meg::regex
