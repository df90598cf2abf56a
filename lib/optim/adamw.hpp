// AdamW over one flat fp32 parameter array, and global-norm gradient clipping.
//
// The model keeps all its parameters in one contiguous array (and its gradients in another of the
// same layout); the optimizer keeps the first and second moments m and v in two more, fp32 both,
// and the number of steps taken. Parameter groups are ranges [begin,end) of that array, each
// saying whether weight decay applies to it: the caller puts norms and biases in groups without
// decay, as Megatron does. The groups must tile the array exactly, so that no parameter is left
// out of the update by mistake.
//
// The update is torch.optim.AdamW's (Loshchilov & Hutter, decoupled decay), through
// cpu::adamw_step: with t the 1-based step number,
//   p -= lr * wd * p
//   m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2
//   p -= lr * (m / (1-beta1^t)) / (sqrt(v / (1-beta2^t)) + eps)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace meg {

struct AdamWOptions {
  // Megatron's defaults (--adam-beta1, --adam-beta2, --adam-eps, --weight-decay).
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

struct ParamGroup {
  size_t begin = 0;
  size_t end = 0;
  bool weight_decay = true;
};

class AdamW {
 public:
  // n parameters in the given groups, which must tile [0,n) (in any order; empty groups are
  // allowed). No groups means one group of all n parameters, with decay. A bad layout is a bug of
  // the caller: std::invalid_argument.
  AdamW(size_t n, std::vector<ParamGroup> groups, const AdamWOptions& options = {});
  explicit AdamW(size_t n, const AdamWOptions& options = {}) : AdamW(n, {}, options) {}

  // One step at learning rate lr: the step count goes up by one, then every group is updated.
  // params and grads hold the n values (std::invalid_argument otherwise).
  void step(std::span<float> params, std::span<const float> grads, double lr);

  size_t size() const { return m_.size(); }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  const AdamWOptions& options() const { return options_; }

  // State, for checkpoints: the moments and the number of steps taken.
  std::span<const float> m() const { return m_; }
  std::span<const float> v() const { return v_; }
  int64_t step_count() const { return step_; }

  // Restores saved state. InputError when the sizes differ from this optimizer's or the step count
  // is negative (a checkpoint of another model, or a damaged one).
  void restore(std::span<const float> m, std::span<const float> v, int64_t step_count);

 private:
  AdamWOptions options_;
  std::vector<ParamGroup> groups_;
  std::vector<float> m_, v_;
  int64_t step_ = 0;
};

// The shard of the distributed optimizer that replica R of D owns: the n parameters padded up to a
// multiple of D, cut into D equal pieces; piece R starts at R * size. The last pieces may reach into
// the padding (or lie wholly in it when n < D).
struct Shard {
  size_t begin = 0;
  size_t size = 0;
};
Shard optimizer_shard(size_t n, int replicas, int replica);
// SHARD's part of the flat array ARRAY, zero where it reaches past ARRAY's end (the padding).
std::vector<float> shard_of(const std::vector<float>& array, const Shard& shard);

// GROUPS (tiling [0, n)) cut to [shard.begin, shard.begin + shard.size), shifted to start at 0;
// the part past n (padding) is one more group, without decay, so the result tiles the shard.
std::vector<ParamGroup> shard_groups(const std::vector<ParamGroup>& groups, size_t n, const Shard& shard);

// The global L2 norm of grads (sqrt of the sum of squares, summed in double).
double grad_norm(std::span<const float> grads);

// Scales grads by max_norm / (norm + 1e-6) when norm > max_norm, as torch.nn.utils.clip_grad_norm_
// does; norm is the global norm, which with several ranks is taken over all of them. Returns
// whether it scaled. A non-finite norm scales nothing and returns false: the caller, who sees the
// norm, decides what to do with the step (skip it, or stop). max_norm <= 0 disables clipping
// (Megatron's --clip-grad 0).
bool clip_grads_to(std::span<float> grads, double norm, double max_norm);

// Both in one: returns the norm before clipping (check it with std::isfinite).
double clip_grad_norm(std::span<float> grads, double max_norm);

}  // namespace meg
