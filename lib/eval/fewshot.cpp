#include "eval/fewshot.hpp"

#include "core/error.hpp"

namespace meg {

FewshotSampler::FewshotSampler(std::span<const EvalDoc> population, int shots, bool same_file, int64_t seed,
                               const std::string& where)
    : population_(population), shots_(shots), same_file_(same_file), random_(seed) {
  const size_t draws = static_cast<size_t>(shots) + (same_file ? 1 : 0);
  if (shots > 0 && population.size() < draws)
    input_error("{}: --num-fewshot {} draws {} examples{}, but the file holds {} documents", where, shots, draws,
                same_file ? " (one more than asked, as the scored document may be drawn)" : "", population.size());
}

std::string FewshotSampler::examples(const EvalDoc& doc) {
  if (shots_ == 0) return "";
  std::string out;
  int taken = 0;
  for (const size_t i : random_.sample(population_.size(), static_cast<size_t>(shots_) + (same_file_ ? 1 : 0))) {
    const EvalDoc& example = population_[i];
    if (taken == shots_ || example.source == doc.source) continue;
    out += example.text;
    if (!example.target.empty()) out += " " + example.target + "\n\n";  // as lm-eval: no target, no delimiters
    ++taken;
  }
  return out;
}

}  // namespace meg
