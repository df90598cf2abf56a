// Few-shot prompts as lm-evaluation-harness builds them (its default ContextSampler): for each
// scored document in order, random.Random(seed).sample() draws examples from the population, and
// each example is its doc_to_text, the target delimiter " ", its target (the gold choice for
// multiple choice) and the few-shot delimiter "\n\n"; the scored document's text follows.
//
// When the population is the scored file itself (lm-eval's "few-shot split equals test split"),
// K + 1 examples are drawn, else K; examples equal to the scored document (the same JSON object)
// are dropped and the first K of the others kept.
// The one generator advances over the documents, so a document's examples depend on those scored
// before it, exactly as in lm-eval.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "eval/python_random.hpp"
#include "eval/task.hpp"

namespace meg {

inline constexpr int64_t kFewshotSeed = 1234;  // lm-eval's default fewshot_random_seed

class FewshotSampler {
 public:
  // SHOTS examples per document from POPULATION (which must outlive the sampler); SAME_FILE: it is
  // the scored task's file. InputError, naming WHERE (the population's file), when it holds too
  // few documents.
  FewshotSampler(std::span<const EvalDoc> population, int shots, bool same_file, int64_t seed,
                 const std::string& where);

  // The examples that precede DOC ("" without shots); call once per scored document, in order.
  std::string examples(const EvalDoc& doc);

 private:
  std::span<const EvalDoc> population_;
  int shots_;
  bool same_file_;
  py::Random random_;
};

}  // namespace meg
