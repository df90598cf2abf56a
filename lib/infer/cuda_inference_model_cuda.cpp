// The CUDA inference model: see infer/cuda_inference_model.hpp for how a call runs.
#include "infer/cuda_inference_model.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "infer/cuda_transformer.hpp"
#include "infer/sampler.hpp"
#include "ops/cuda/check.hpp"
#include "ops/cuda/ops.hpp"
#include "ops/cuda/stream.hpp"
#include "parallel/nccl_comm.hpp"
#include "parallel/peer_sums.hpp"
#include "parallel/rank_device.hpp"

namespace meg {

namespace {

static_assert(kMaxAppendTopK <= cuda::kMaxTopK, "append_top_k's rows come from top_k_rows");

// The most bytes a tensor-parallel sum goes through PeerSums: a decode step's rows at most (the
// embedding's and each block's sums of [requests, C]); larger sums, prompts', are NCCL's.
constexpr size_t kMaxPeerSumBytes = size_t(1) << 20;

// MAX_LENGTH resolved (0: the model's seq_length) and checked with the other sizes, before any
// weight is uploaded.
int checked_max_length(const ModelConfig& config, int slots, int max_length, const CudaInferenceOptions& options) {
  if (slots < 1) input_error("--batch {}: must be at least 1", slots);
  if (max_length < 0) input_error("--max-length {}: must be positive", max_length);
  if (options.pass_tokens < 1) throw std::invalid_argument("inference model: pass_tokens must be positive");
  const int length = max_length > 0 ? max_length : int(config.seq_length);
  if (config.learned_positions() && length > config.seq_length)
    input_error("--max-length {}: this GPT-2 model has only {} learned positions", length, config.seq_length);
  if (!cuda::cached_attention_supports(int(config.head_size())))
    input_error("inference model: head size {} is not supported on the GPU", config.head_size());
  return length;
}

template <typename X>
class CudaInferenceModelImpl final : public CudaInferenceModel {
 public:
  CudaInferenceModelImpl(const CheckpointModel& checkpoint, int slots, int max_length,
                         const CudaInferenceOptions& options, Comm* tp);
  ~CudaInferenceModelImpl() override;

  const ModelConfig& config() const override { return net_.config(); }
  int slots() const override { return slots_; }
  int max_length() const override { return max_length_; }
  int length(int slot) const override { return lengths_[size_t(checked_slot(slot, slots_))]; }
  void reset(int slot) override {
    lengths_[size_t(checked_slot(slot, slots_))] = 0;
    chain_slots_.reset();  // no chained call after it (inference_model.hpp)
  }
  bool penalises() const override { return true; }
  bool overlaps() const override { return true; }
  void queue_choices(std::span<const AppendRequest> requests, int choices, std::span<const SoftmaxDraw> draws,
                     bool chained) override;
  void take_choices(int32_t* tokens) override;
  void append(std::span<const AppendRequest> requests, float* logits) override;
  void append_greedy(std::span<const AppendRequest> requests, int choices, int32_t* tokens) override;
  void append_top_k(std::span<const AppendRequest> requests, int choices, int k, int32_t* tokens,
                    float* logits) override;
  void append_sample(std::span<const AppendRequest> requests, int choices, std::span<const SoftmaxDraw> draws,
                     int32_t* tokens, float* logits) override;
  std::span<float> logits_buffer() override {
    const size_t n = size_t(slots_) * size_t(net_.dims().V);
    host_logits_.grow(n);
    return {host_logits_.get(), n};
  }
  cudaStream_t stream() const override { return net_.stream(); }

 private:
  // Tokens [first, first + count) of request REQUEST, at positions from POSITION on, in one pass;
  // LAST when they end the request.
  struct Piece {
    int request, slot, first, count, position;
    bool last;
  };
  // Fresh prompts of the same length in consecutive rows from ROW: one [count, length] batch of
  // attention.
  struct Prompts {
    int row, length, count;
  };
  // What a pass's device work needs besides the integers staged for it: rows [tokens, positions,
  // slots, then `cached` row numbers (cached_attention's queries), then `outputs` row numbers (the
  // requests' last rows, whose logits go to output rows [first_output, first_output + outputs))].
  struct Pass {
    int N = 0, cached = 0, outputs = 0, first_output = 0;
    int new_keys = 0;  // the most tokens of one slot that go through the cache (cached_attention's)
    int longest = 0;   // the most keys a row that goes through the cache attends to (cached_attention's)
    bool chained = false;  // the tokens are the last choices (top_tokens_), not the staged ones
    std::vector<Prompts> prompts;
    size_t staged() const { return 3 * size_t(N) + size_t(cached) + size_t(outputs); }
  };

  // What a pass reads off its output rows' logits: the logits in fp32 (k = 0), each row's k
  // largest over tokens [0, choices) (k = 1: the argmax alone), or with DRAW each row's draw over
  // them (sample_rows, from draws_), and with LOGITS the logits in fp32 too.
  struct Readout {
    int k = 0, choices = 0;
    bool draw = false, logits = false;
    bool penalty = false;  // the rows' repetition penalties first (on fp32 copies of the rows)
    auto operator<=>(const Readout&) const = default;
  };

  // The host side of a call: its staged integers, draws and penalties, which the device copies in
  // after the host has moved on when the call is queued; and a queued call's tokens and the event
  // after their copy out. Calls alternate between two, so that the one queued after a queued call
  // stages without overwriting what that call's copies in may not yet have read.
  struct HostSide {
    PinnedArray<int32_t> staging, tokens;
    PinnedArray<cuda::RowDraw> draws;
    PinnedArray<float> penalties;
    cuda::Event done;
    size_t outputs = 0;
  };

  int run_passes(std::span<const AppendRequest> requests, Readout readout, std::span<const SoftmaxDraw> draws = {},
                 bool queued = false, bool chained = false);
  void copy_tokens(int32_t* tokens, size_t n);
  void copy_logits(float* logits, int outputs);
  void finish(std::span<const AppendRequest> requests);
  std::vector<std::vector<Piece>> plan(std::span<const AppendRequest> requests) const;
  Pass stage(const std::vector<Piece>& pieces, std::span<const AppendRequest> requests, int first_output,
             int32_t* host) const;
  void run(const Pass& pass, Readout readout);
  cudaGraphExec_t capture(const Pass& pass, Readout readout);
  void forward(const Pass& pass, Readout readout);
  void read_out_f32(const Pass& pass, Readout readout, const int32_t* positions, const int32_t* slots,
                    const int32_t* last);
  template <typename Row>
  void choose(const Pass& pass, Readout readout, const Row* rows, int stride);
  void choose_split(const Pass& pass, Readout readout, const int32_t* positions, const int32_t* slots,
                    const int32_t* last);
  void merge_split_top_k(int k, int32_t* tokens, float* logits);
  void gather_logits(float* out, int R);
  // The cache of attention layer LAYER (counting the attention layers).
  X* k_cache(size_t layer) const { return cache_.get() + 2 * layer * layer_elements_; }
  X* v_cache(size_t layer) const { return cache_.get() + (2 * layer + 1) * layer_elements_; }

  int slots_, max_length_, pass_rows_;
  bool use_graphs_;
  std::unique_ptr<NcclComm> tp_;  // the tensor-parallel group (null: the whole model); outlives net_
  std::unique_ptr<PeerSums> peer_sums_;  // its sums of a few rows, where its GPUs share memory
  CudaTransformer<X> net_;        // before the arrays: they go back to its allocator
  std::vector<int> lengths_;
  // The last call's passes that had outputs: (first output, outputs), in order.
  std::vector<std::pair<int, int>> output_passes_;
  size_t layer_elements_;  // of one attention layer's K (or V) cache
  cuda::DeviceArray<X> cache_, x_, rows_, logits_;
  // logits_f32_ [slots, V]: the logits the caller gets; with tensor parallelism, shard_f32_ this
  // member's [slots, Vp] and gathered_ every member's.
  cuda::DeviceArray<float> logits_f32_, shard_f32_, gathered_, lse_, scratch_;
  cuda::DeviceArray<int32_t> ints_;
  // append_greedy()'s and append_sample()'s tokens [slots], append_top_k()'s [slots, k] and their
  // logits; append_sample()'s draws [slots] and the requests' repetition penalties [slots], each
  // staged in a HostSide.
  cuda::DeviceArray<int32_t> top_tokens_;
  cuda::DeviceArray<float> top_logits_;
  cuda::DeviceArray<cuda::RowDraw> draws_;
  cuda::DeviceArray<float> penalties_;
  // The output layer's argmax epilogue's scratch (greedy passes of a few outputs, one GPU).
  cuda::DeviceArray<cuda::SmallLinearArgmaxScratch> argmax_scratch_;
  // The tokens each slot holds [slots, max_length], logged by every pass's embedding lookup: what
  // the repetition penalty reads.
  cuda::DeviceArray<int32_t> history_;
  // With tensor parallelism, choose_split()'s candidates: this member's [2][R][K] of a pass, and
  // every member's [P][2][R][K] of each pass in turn (host_split_ their copy for top-k).
  cuda::DeviceArray<int32_t> split_own_, split_all_;
  PinnedArray<int32_t> host_split_;
  HostSide sides_[2];
  int side_ = 0;             // the side the next call stages in
  std::deque<int> queued_;   // the queued calls' sides, oldest first
  // The slots of the last queued call's requests, whose choices top_tokens_ holds until another
  // call runs (then none; after a reset() too): what a chained call follows.
  std::optional<std::vector<int>> chain_slots_;
  PinnedArray<float> host_logits_;  // logits_buffer(), allocated when first asked for
  // Decode steps by request count, chaining, readout (the graph holds where the tokens come from,
  // the readout's k and column count) and attention grid (staged while the context is short,
  // cached_attention_staged): captured, and run once directly before that.
  using StepShape = std::tuple<int, bool, Readout, bool>;
  std::map<StepShape, cudaGraphExec_t> graphs_;
  std::set<StepShape> seen_;
};

template <typename X>
CudaInferenceModelImpl<X>::CudaInferenceModelImpl(const CheckpointModel& checkpoint, int slots, int max_length,
                                                  const CudaInferenceOptions& options, Comm* tp)
    : slots_(slots),
      max_length_(checked_max_length(checkpoint.config, slots, max_length, options)),
      pass_rows_(std::max(slots, options.pass_tokens)),
      use_graphs_(options.cuda_graphs),
      tp_(tp != nullptr && tp->size() > 1 ? std::make_unique<NcclComm>(*tp) : nullptr),
      net_(checkpoint.config, checkpoint.params, pass_rows_, max_length_, tp_.get()),
      lengths_(size_t(slots), 0) {
  net_.set_small_linear(options.small_linear);
  const auto& d = net_.dims();
  if (tp_) {
    peer_sums_ = PeerSums::create(*tp, std::min(size_t(slots) * d.C * sizeof(X), kMaxPeerSumBytes));
    net_.set_peer_sums(peer_sums_.get());
  }
  auto& alloc = net_.allocator();
  layer_elements_ = size_t(slots) * d.NKV * size_t(max_length_) * d.HS;
  cache_ = cuda::DeviceArray<X>(alloc, 2 * net_.attention_layers() * layer_elements_);
  const size_t rows = size_t(pass_rows_);
  x_ = cuda::DeviceArray<X>(alloc, rows * d.C);
  rows_ = cuda::DeviceArray<X>(alloc, rows * d.C);
  logits_ = cuda::DeviceArray<X>(alloc, size_t(slots) * d.Vp);
  logits_f32_ = cuda::DeviceArray<float>(alloc, size_t(slots) * d.V);
  if (tp_) {
    shard_f32_ = cuda::DeviceArray<float>(alloc, size_t(slots) * d.Vp);
    gathered_ = cuda::DeviceArray<float>(alloc, size_t(tp_->size()) * slots * d.Vp);
    split_own_ = cuda::DeviceArray<int32_t>(alloc, 2 * size_t(slots) * kMaxAppendTopK);
    split_all_ = cuda::DeviceArray<int32_t>(alloc, size_t(tp_->size()) * 2 * slots * kMaxAppendTopK);
  }
  lse_ = cuda::DeviceArray<float>(alloc, rows * d.NH);
  // The splits, and with them the scratch, only fall as the queries grow.
  size_t scratch = 0;
  for (int q = 1; q <= pass_rows_ && cuda::cached_attention_splits(q, d.NH, d.NKV) > 1; ++q)
    scratch = std::max(scratch, cuda::cached_attention_scratch(q, d.NH, d.NKV, d.HS));
  scratch_ = cuda::DeviceArray<float>(alloc, scratch);
  MEG_CUDA_CHECK(cudaMemsetAsync(scratch_.get(), 0, scratch * sizeof(float), stream()));
  ints_ = cuda::DeviceArray<int32_t>(alloc, 4 * rows + size_t(slots));
  top_tokens_ = cuda::DeviceArray<int32_t>(alloc, size_t(slots) * kMaxAppendTopK);
  top_logits_ = cuda::DeviceArray<float>(alloc, size_t(slots) * kMaxAppendTopK);
  draws_ = cuda::DeviceArray<cuda::RowDraw>(alloc, size_t(slots));
  penalties_ = cuda::DeviceArray<float>(alloc, size_t(slots));
  argmax_scratch_ = cuda::DeviceArray<cuda::SmallLinearArgmaxScratch>(alloc, 1);
  MEG_CUDA_CHECK(cudaMemsetAsync(argmax_scratch_.get(), 0, argmax_scratch_.bytes(), stream()));
  for (HostSide& side : sides_) {
    side.draws.grow(size_t(slots));
    side.penalties.grow(size_t(slots));
    side.tokens.grow(size_t(slots));
  }
  history_ = cuda::DeviceArray<int32_t>(alloc, size_t(slots) * size_t(max_length_));
}

template <typename X>
CudaInferenceModelImpl<X>::~CudaInferenceModelImpl() {
  cudaStreamSynchronize(stream());
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
}

// The requests' tokens in order, cut into passes of at most pass_rows_ rows. A request that does not
// fit in what is left of a pass but fits in a whole one starts the next pass, so that a prompt is cut
// only when it is longer than a pass; each request then ends in one pass, in request order.
template <typename X>
std::vector<std::vector<typename CudaInferenceModelImpl<X>::Piece>> CudaInferenceModelImpl<X>::plan(
    std::span<const AppendRequest> requests) const {
  std::vector<std::vector<Piece>> passes(1);
  int room = pass_rows_;
  for (int i = 0; i < int(requests.size()); ++i) {
    const int count = int(requests[size_t(i)].tokens.size()), slot = requests[size_t(i)].slot;
    for (int first = 0; first < count;) {
      const int left = count - first;
      if (room == 0 || (left > room && left <= pass_rows_)) {
        passes.emplace_back();
        room = pass_rows_;
      }
      const int take = std::min(left, room);
      passes.back().push_back({i, slot, first, take, lengths_[size_t(slot)] + first, first + take == count});
      first += take;
      room -= take;
    }
  }
  return passes;
}

// Fills HOST with the pass's integers (Pass's layout) and says what its device work is. A prompt
// starting an empty slot is a fresh prompt, attended within itself by the flash attention; every
// other row (decode steps, tokens after cached ones, one-token prompts) goes through the cache.
template <typename X>
typename CudaInferenceModelImpl<X>::Pass CudaInferenceModelImpl<X>::stage(const std::vector<Piece>& pieces,
                                                                          std::span<const AppendRequest> requests,
                                                                          int first_output, int32_t* host) const {
  Pass pass;
  pass.first_output = first_output;
  for (const Piece& p : pieces) pass.N += p.count;
  int32_t *tokens = host, *positions = host + pass.N, *slots = positions + pass.N, *cached = slots + pass.N;
  std::vector<int32_t> last;
  int row = 0;
  for (const Piece& p : pieces) {
    const auto& r = requests[size_t(p.request)];
    for (int t = 0; t < p.count; ++t) {
      tokens[row + t] = r.tokens[size_t(p.first + t)];
      positions[row + t] = p.position + t;
      slots[row + t] = p.slot;
    }
    if (p.position == 0 && p.count > 1) {
      Prompts* prev = pass.prompts.empty() ? nullptr : &pass.prompts.back();
      if (prev && prev->length == p.count && prev->row + prev->length * prev->count == row)
        ++prev->count;
      else
        pass.prompts.push_back({row, p.count, 1});
    } else {
      for (int t = 0; t < p.count; ++t) cached[pass.cached++] = row + t;
      pass.new_keys = std::max(pass.new_keys, p.count);
      pass.longest = std::max(pass.longest, p.position + p.count);
    }
    if (p.last) last.push_back(row + p.count - 1);
    row += p.count;
  }
  std::copy(last.begin(), last.end(), cached + pass.cached);
  pass.outputs = int(last.size());
  return pass;
}

template <typename X>
void CudaInferenceModelImpl<X>::append(std::span<const AppendRequest> requests, float* logits) {
  const int outputs = run_passes(requests, {});
  if (outputs == 0) return;
  copy_logits(logits, outputs);
  finish(requests);
}

// The choice on the device: the argmax kernel's is the sampler's greedy one (ops.hpp: the lowest
// id among equal maxima, NaN never), and the step copies back a token a row rather than its
// logits. Tensor-parallel members merge the argmaxes of their shards alike (choose_split()).
template <typename X>
void CudaInferenceModelImpl<X>::append_greedy(std::span<const AppendRequest> requests, int choices,
                                              int32_t* tokens) {
  check_choices(choices, int(config().vocab_size));
  check_penalties(requests, penalises());
  const int outputs = run_passes(requests, {1, choices, false, false, any_penalty(requests)});
  if (outputs == 0) return;
  copy_tokens(tokens, size_t(outputs));
  finish(requests);
}

// The selection on the device (top_k_rows: the K largest, in no order), ordered on the host.
template <typename X>
void CudaInferenceModelImpl<X>::append_top_k(std::span<const AppendRequest> requests, int choices, int k,
                                             int32_t* tokens, float* logits) {
  check_top_k(choices, k, int(config().vocab_size));
  check_penalties(requests, penalises());
  const int outputs = run_passes(requests, {k, choices, false, false, any_penalty(requests)});
  if (outputs == 0) return;
  if (tp_) {
    merge_split_top_k(k, tokens, logits);
    return finish(requests);
  }
  const size_t n = size_t(outputs) * size_t(k);
  copy_tokens(tokens, n);
  MEG_CUDA_CHECK(cudaMemcpyAsync(logits, top_logits_.get(), n * sizeof(float), cudaMemcpyDeviceToHost, stream()));
  finish(requests);
  for (int i = 0; i < outputs; ++i) order_top_k(tokens + size_t(i) * k, logits + size_t(i) * k, k);
}

// The draw on the device (sample_rows), each request's draw staged for it before its pass runs.
template <typename X>
void CudaInferenceModelImpl<X>::append_sample(std::span<const AppendRequest> requests, int choices,
                                              std::span<const SoftmaxDraw> draws, int32_t* tokens, float* logits) {
  check_choices(choices, int(config().vocab_size));
  check_draws(draws, requests.size());
  check_penalties(requests, penalises());
  const int outputs = run_passes(requests, {1, choices, true, logits != nullptr, any_penalty(requests)}, draws);
  if (outputs == 0) return;
  copy_tokens(tokens, size_t(outputs));
  if (logits) copy_logits(logits, outputs);
  finish(requests);
}

// A queued call runs as append_greedy() or append_sample() does, but copies its tokens to its
// side's page-locked array and marks the copy's end with an event rather than waiting for it. A
// chained call's requests get a token each to be planned and staged by, which its pass does not
// read (Pass::chained).
template <typename X>
void CudaInferenceModelImpl<X>::queue_choices(std::span<const AppendRequest> requests, int choices,
                                              std::span<const SoftmaxDraw> draws, bool chained) {
  check_queue(requests, draws, chained, queued_.size(), chain_slots_ ? &*chain_slots_ : nullptr);
  check_choices(choices, int(config().vocab_size));
  check_penalties(requests, penalises());
  static constexpr int32_t kUnread = 0;
  std::vector<AppendRequest> own;
  if (chained) {
    own.assign(requests.begin(), requests.end());
    for (AppendRequest& r : own) r.tokens = {&kUnread, 1};
    requests = own;
  }
  const int outputs = run_passes(requests, {1, choices, !draws.empty(), false, any_penalty(requests)}, draws, true,
                                 chained);
  HostSide& side = sides_[side_];
  side.outputs = size_t(outputs);
  MEG_CUDA_CHECK(cudaMemcpyAsync(side.tokens.get(), top_tokens_.get(), side.outputs * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, stream()));
  MEG_CUDA_CHECK(cudaEventRecord(side.done.get(), stream()));
  chain_slots_.emplace();
  for (const auto& r : requests) {
    lengths_[size_t(r.slot)] += int(r.tokens.size());
    chain_slots_->push_back(r.slot);
  }
  queued_.push_back(side_);
  side_ ^= 1;
}

template <typename X>
void CudaInferenceModelImpl<X>::take_choices(int32_t* tokens) {
  if (queued_.empty()) throw std::logic_error("inference model: take_choices() without a queued call");
  const HostSide& side = sides_[queued_.front()];
  if (tp_)
    tp_->wait(side.done.get());
  else
    MEG_CUDA_CHECK(cudaEventSynchronize(side.done.get()));
  std::copy_n(side.tokens.get(), side.outputs, tokens);
  queued_.pop_front();
}

// Queues the copy out of the first N of top_tokens_ (the chosen tokens, or top-k's candidates).
template <typename X>
void CudaInferenceModelImpl<X>::copy_tokens(int32_t* tokens, size_t n) {
  MEG_CUDA_CHECK(cudaMemcpyAsync(tokens, top_tokens_.get(), n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream()));
}

// Queues the copy out of OUTPUTS rows of fp32 logits.
template <typename X>
void CudaInferenceModelImpl<X>::copy_logits(float* logits, int outputs) {
  MEG_CUDA_CHECK(cudaMemcpyAsync(logits, logits_f32_.get(), size_t(outputs) * size_t(net_.dims().V) * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream()));
}

// Waits for the device (the copy out queued last) and counts the requests' tokens in.
template <typename X>
void CudaInferenceModelImpl<X>::finish(std::span<const AppendRequest> requests) {
  MEG_CUDA_CHECK(cudaStreamSynchronize(stream()));
  for (const auto& r : requests) lengths_[size_t(r.slot)] += int(r.tokens.size());
}

// Checks REQUESTS and queues their passes, each reading off its output rows as READOUT says (with
// DRAWS, a request's, for a readout that draws); the outputs (one a request, in request order; 0
// for no requests). QUEUED: queue_choices()'s call, which returns without waiting for the device;
// CHAINED, its requests hold a token each that is not run (the last choices are).
template <typename X>
int CudaInferenceModelImpl<X>::run_passes(std::span<const AppendRequest> requests, Readout readout,
                                          std::span<const SoftmaxDraw> draws, bool queued, bool chained) {
  if (!queued) check_nothing_queued(queued_.size());
  check_append(requests, lengths_, max_length_, int(config().vocab_size));
  chain_slots_.reset();
  if (requests.empty()) return 0;
  // The side is free: the call that used it last ended waiting for the device, or was taken.
  HostSide& side = sides_[side_];
  if (readout.draw) {
    for (size_t i = 0; i < draws.size(); ++i) side.draws.get()[i] = {draws[i].temperature, draws[i].top_p, draws[i].u};
    MEG_CUDA_CHECK(cudaMemcpyAsync(draws_.get(), side.draws.get(), draws.size() * sizeof(cuda::RowDraw),
                                   cudaMemcpyHostToDevice, stream()));
  }
  if (readout.penalty) {  // in fp32, as the host sampler's
    for (size_t i = 0; i < requests.size(); ++i) side.penalties.get()[i] = float(requests[i].repetition_penalty);
    MEG_CUDA_CHECK(cudaMemcpyAsync(penalties_.get(), side.penalties.get(), requests.size() * sizeof(float),
                                   cudaMemcpyHostToDevice, stream()));
  }
  const auto passes = plan(requests);
  output_passes_.clear();
  size_t tokens = 0;
  for (const auto& r : requests) tokens += r.tokens.size();
  // Every pass stages into its own part, so no copy still queued reads what a later pass writes.
  side.staging.grow(4 * tokens + requests.size());
  int32_t* host = side.staging.get();
  int outputs = 0;
  for (const auto& pieces : passes) {
    Pass pass = stage(pieces, requests, outputs, host);
    pass.chained = chained;
    MEG_CUDA_CHECK(cudaMemcpyAsync(ints_.get(), host, pass.staged() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   stream()));
    run(pass, readout);
    if (pass.outputs > 0) output_passes_.emplace_back(outputs, pass.outputs);
    host += pass.staged();
    outputs += pass.outputs;
  }
  // A failed or stopped peer shows here, as an error, rather than as a copy waiting forever (a
  // queued call's in take_choices()).
  if (tp_ && !queued) tp_->wait(stream());
  return outputs;
}

// A decode step (every row the last of its request, one token each, the logits written from output
// row 0) runs from a CUDA graph after the first step of its size, which runs directly and leaves
// cuBLASLt's plans made. Everything else about the step is in the device arrays the graph reads.
template <typename X>
void CudaInferenceModelImpl<X>::run(const Pass& pass, Readout readout) {
  const bool decode = pass.prompts.empty() && pass.outputs == pass.N && pass.first_output == 0;
  if (!use_graphs_ || !decode) return forward(pass, readout);
  const auto& d = net_.dims();
  const bool staged = cuda::cached_attention_staged(pass.N, d.NH, d.NKV, d.HS, pass.longest);
  const StepShape key{pass.N, pass.chained, readout, staged};
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (seen_.insert(key).second) return forward(pass, readout);
    it = graphs_.emplace(key, capture(pass, readout)).first;
  }
  MEG_CUDA_CHECK(cudaGraphLaunch(it->second, stream()));
}

template <typename X>
cudaGraphExec_t CudaInferenceModelImpl<X>::capture(const Pass& pass, Readout readout) {
  // Thread-local: another thread's CUDA calls neither join the capture nor break it.
  MEG_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    forward(pass, readout);
  } catch (...) {
    cudaStreamEndCapture(stream(), &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  MEG_CUDA_CHECK(cudaStreamEndCapture(stream(), &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MEG_CUDA_CHECK(err);
  return exec;
}

// The device work of a pass, on the integers staged in ints_ (Pass's layout).
template <typename X>
void CudaInferenceModelImpl<X>::forward(const Pass& pass, Readout readout) {
  const auto& d = net_.dims();
  const cudaStream_t s = stream();
  const int N = pass.N;
  const int32_t* staged = ints_.get();
  const int32_t *positions = staged + N, *slots = positions + N, *cached = slots + N, *last = cached + pass.cached;
  // A chained pass's rows are the last call's requests in order, one token each: its choices.
  const int32_t* tokens = pass.chained ? top_tokens_.get() : staged;
  X* x = x_.get();

  // The token and position embeddings (GPT-2's), each row's position from positions. Vocabulary-
  // parallel: each member looks up the tokens of its rows (zeros for the others), the sum over the
  // group is the whole lookup; then the (replicated) position embedding, added once.
  cuda::embedding_forward<X>(x, tokens, net_.wte(), tp_ ? nullptr : net_.wpe(), 1, N, d.C, d.V0, d.Vp, s, positions,
                             cuda::TokenLog{history_.get(), slots, max_length_});
  if (tp_) {
    if (!(peer_sums_ && peer_sums_->sum(x, size_t(N) * d.C, s))) tp_->all_reduce_sum(x, size_t(N) * d.C, s);
    if (net_.wpe()) {
      // The positions' rows are a lookup of their own (positions index wpe as tokens index wte).
      cuda::embedding_forward<X>(rows_.get(), positions, net_.wpe(), nullptr, 1, N, d.C, 0,
                                 int(config().seq_length), s);
      cuda::add(x, x, rows_.get(), size_t(N) * d.C, s);
    }
  }
  const typename CudaTransformer<X>::KvCache cache{
      [&](size_t l) { return std::make_pair(k_cache(l), v_cache(l)); }, slots, positions, max_length_};
  // The layers cache each attention layer's keys and values first: a fresh prompt then attends
  // within itself, every other row against its slot's cache.
  // A sliding window reads only the last window-size + 1 positions; the cache keeps them all.
  const int window = config().attention_window();
  const auto attention = [&](size_t l, X* qkv, X* out) {
    for (const Prompts& p : pass.prompts)
      cuda::attention_forward(out + size_t(p.row) * d.CQ, lse_.get(), qkv + size_t(p.row) * d.QKV, p.count, p.length,
                              d.NH, d.NKV, d.HS, s, 0, 0, window);
    cuda::cached_attention(out, qkv, k_cache(l), v_cache(l), cached, slots, positions, pass.cached, d.NH, d.NKV,
                           d.HS, max_length_, pass.longest, pass.new_keys, scratch_.get(), s, window);
  };
  net_.blocks(x, N, attention, &cache);
  if (pass.outputs == 0) return;  // the middle of a prompt longer than a pass
  const X* h = x;
  if (pass.outputs != N) {  // the requests' last rows, gathered (a lookup of x's rows by row number)
    cuda::embedding_forward<X>(rows_.get(), last, x, nullptr, 1, pass.outputs, d.C, 0, N, s);
    h = rows_.get();
  }
  // One GPU, greedy, no penalty: the argmax in the output layer's epilogue where it can take it.
  const bool argmax = !tp_ && !readout.penalty && !readout.draw && readout.k == 1;
  const cuda::SmallLinearArgmax epilogue{top_tokens_.get() + pass.first_output, top_logits_.get() + pass.first_output,
                                         argmax_scratch_.get(), readout.choices};
  const bool chosen = net_.logits(logits_.get(), h, pass.outputs, argmax ? &epilogue : nullptr);
  const bool chooses = readout.draw || readout.k > 0;
  if (tp_ && readout.k > 0 && !readout.draw)
    return choose_split(pass, readout, positions, slots, pass.outputs != N ? last : nullptr);
  if (tp_ || readout.penalty || !chooses)
    return read_out_f32(pass, readout, positions, slots, pass.outputs != N ? last : nullptr);
  // One GPU, no penalty: the choice straight from the output layer's rows.
  if (!chosen) choose(pass, readout, logits_.get(), d.Vp);
  if (readout.logits)
    cuda::logits_to_float(logits_f32_.get() + size_t(pass.first_output) * d.V, logits_.get(), pass.outputs, d.V, d.Vp,
                          s);
}

// The output rows as fp32 rows [R, V] where the caller of a readout with logits finds them (every
// member's shard gathered, under tensor parallelism), with the requests' repetition penalties
// applied if the readout has them, then chosen from as READOUT says. POSITIONS, SLOTS and LAST are
// the pass's staged rows (LAST null: every row an output).
template <typename X>
void CudaInferenceModelImpl<X>::read_out_f32(const Pass& pass, Readout readout, const int32_t* positions,
                                             const int32_t* slots, const int32_t* last) {
  const auto& d = net_.dims();
  const cudaStream_t s = stream();
  const int R = pass.outputs, first = pass.first_output;
  float* rows = logits_f32_.get() + size_t(first) * d.V;
  if (tp_)
    gather_logits(rows, R);
  else
    cuda::logits_to_float(rows, logits_.get(), R, d.V, d.Vp, s);
  if (readout.penalty)
    cuda::penalise_rows(rows, history_.get(), slots, positions, last, penalties_.get() + first, R, d.V, max_length_, s);
  choose(pass, readout, rows, d.V);
}

// The pass's choices (READOUT's draw, argmax or k largest; none for k = 0) from its output rows
// ROWS [R, STRIDE], into top_tokens_ (and top_logits_) from the pass's first output on.
template <typename X>
template <typename Row>
void CudaInferenceModelImpl<X>::choose(const Pass& pass, Readout readout, const Row* rows, int stride) {
  const cudaStream_t s = stream();
  const int R = pass.outputs, first = pass.first_output;
  if (readout.draw)
    cuda::sample_rows(top_tokens_.get() + first, rows, draws_.get() + first, R, readout.choices, stride, s);
  else if (readout.k == 1)
    cuda::argmax_rows(top_tokens_.get() + first, rows, R, readout.choices, stride, s, top_logits_.get() + first);
  else if (readout.k > 1)
    cuda::top_k_rows(top_tokens_.get() + size_t(first) * readout.k, top_logits_.get() + size_t(first) * readout.k,
                     rows, R, readout.choices, stride, readout.k, s);
}

// Under tensor parallelism, an argmax or top-k readout without gathering the logits: each member
// takes the K largest of its own shard's columns below the readout's choices (tokens [V0, V0 + Vp),
// penalised first, in fp32, if the readout has penalties), the same values one GPU would compare
// (the gathered rows are the members' rows), and the members' candidates are gathered: K
// columns and values a row cross the group rather than Vp logits. The argmax is merged on the
// device (merge_argmax_rows, into top_tokens_); top-k's candidates stay in split_all_ for
// merge_split_top_k(). POSITIONS, SLOTS and LAST are the pass's staged rows (read_out_f32's).
template <typename X>
void CudaInferenceModelImpl<X>::choose_split(const Pass& pass, Readout readout, const int32_t* positions,
                                             const int32_t* slots, const int32_t* last) {
  const auto& d = net_.dims();
  const cudaStream_t s = stream();
  const int R = pass.outputs, first = pass.first_output, K = readout.k, P = tp_->size();
  const int columns = std::clamp(readout.choices - d.V0, 0, d.Vp);
  int32_t* own = split_own_.get();  // [2][R][K]: columns within the shard, then their values' bits
  float* values = reinterpret_cast<float*>(own + size_t(R) * K);
  const auto select = [&](const auto* rows, int stride) {
    if (K == 1)
      cuda::argmax_rows(own, rows, R, columns, stride, s, values);
    else
      cuda::top_k_rows(own, values, rows, R, columns, stride, K, s);
  };
  if (columns == 0) {  // no candidates: columns -1, values NaN
    MEG_CUDA_CHECK(cudaMemsetAsync(own, 0xff, 2 * size_t(R) * K * sizeof(int32_t), s));
  } else if (readout.penalty) {
    float* rows = shard_f32_.get();
    cuda::logits_to_float(rows, logits_.get(), R, columns, d.Vp, s);
    cuda::penalise_rows(rows, history_.get(), slots, positions, last, penalties_.get() + first, R, columns,
                        max_length_, s, d.V0);
    select(rows, columns);
  } else {
    select(logits_.get(), d.Vp);
  }
  // The passes' blocks one after the other: this one's [P][2][R][K] after the earlier passes' rows.
  int32_t* all = split_all_.get() + size_t(first) * P * 2 * K;
  tp_->all_gather(reinterpret_cast<float*>(all), reinterpret_cast<const float*>(own), 2 * size_t(R) * K, s);
  if (K == 1) cuda::merge_argmax_rows(top_tokens_.get() + first, all, P, R, d.Vp, s);
}

// append_top_k()'s rows under tensor parallelism, waiting for the device: each row's K largest
// of its members' candidates (choose_split()'s blocks, a pass at a time), ordered as order_top_k()
// orders them, tokens -1 past the last. A row's K largest over the whole vocabulary are among its
// members' K largest, and the order (the larger value first, the lower token among equal ones)
// is top_k_rows's choice at the K-th, so the rows are those top_k_rows gives over the gathered
// logits.
template <typename X>
void CudaInferenceModelImpl<X>::merge_split_top_k(int k, int32_t* tokens, float* logits) {
  const int P = tp_->size(), Vp = net_.dims().Vp;
  const auto& [last_first, last_rows] = output_passes_.back();
  const size_t words = size_t(last_first + last_rows) * P * 2 * k;
  host_split_.grow(words);
  MEG_CUDA_CHECK(cudaMemcpyAsync(host_split_.get(), split_all_.get(), words * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                 stream()));
  MEG_CUDA_CHECK(cudaStreamSynchronize(stream()));
  std::vector<Sampler::Candidate> row;
  for (const auto& [first, R] : output_passes_) {
    const int32_t* block = host_split_.get() + size_t(first) * P * 2 * k;  // [P][2][R][K]
    for (int r = 0; r < R; ++r) {
      row.clear();
      for (int m = 0; m < P; ++m) {
        const int32_t* columns = block + (size_t(m) * 2 * R + r) * k;
        const int32_t* bits = columns + size_t(R) * k;
        for (int j = 0; j < k; ++j) {
          if (columns[j] < 0) continue;
          float value;
          std::memcpy(&value, &bits[j], sizeof(value));
          row.push_back({value, m * Vp + columns[j]});
        }
      }
      const size_t kept = std::min(row.size(), size_t(k));
      std::partial_sort(row.begin(), row.begin() + std::ptrdiff_t(kept), row.end(), Sampler::before);
      int32_t* t = tokens + size_t(first + r) * k;
      float* l = logits + size_t(first + r) * k;
      for (int j = 0; j < k; ++j) {
        t[j] = size_t(j) < kept ? row[size_t(j)].id : -1;
        l[j] = size_t(j) < kept ? float(row[size_t(j)].logit) : 0.0f;
      }
    }
  }
}

// Every member's vocabulary shard of the logits of R rows in fp32, gathered ([member][R][Vp]), and
// each member's real columns copied to where they go: member m's are columns [m * Vp, (m + 1) * Vp)
// of OUT [R, V].
template <typename X>
void CudaInferenceModelImpl<X>::gather_logits(float* out, int R) {
  const auto& d = net_.dims();
  const cudaStream_t s = stream();
  const size_t shard = size_t(R) * d.Vp;
  cuda::logits_to_float(shard_f32_.get(), logits_.get(), R, d.Vp, d.Vp, s);
  tp_->all_gather(gathered_.get(), shard_f32_.get(), shard, s);
  for (int m = 0; m < tp_->size(); ++m) {
    const int first = m * d.Vp, columns = std::clamp(d.V - first, 0, d.Vp);
    if (columns == 0) continue;
    MEG_CUDA_CHECK(cudaMemcpy2DAsync(out + first, size_t(d.V) * sizeof(float), gathered_.get() + size_t(m) * shard,
                                     size_t(d.Vp) * sizeof(float), size_t(columns) * sizeof(float), size_t(R),
                                     cudaMemcpyDeviceToDevice, s));
  }
}

}  // namespace

std::unique_ptr<CudaInferenceModel> make_cuda_inference_model(const CheckpointModel& checkpoint, Precision precision,
                                                              int slots, int max_length,
                                                              const CudaInferenceOptions& options, Comm* tp) {
  check_checkpoint_shard(checkpoint, tp);
  use_rank_cuda_device();
  switch (precision) {
    case Precision::fp32:
      return std::make_unique<CudaInferenceModelImpl<float>>(checkpoint, slots, max_length, options, tp);
    case Precision::bf16:
      return std::make_unique<CudaInferenceModelImpl<__nv_bfloat16>>(checkpoint, slots, max_length, options, tp);
    case Precision::fp16:
      return std::make_unique<CudaInferenceModelImpl<__half>>(checkpoint, slots, max_length, options, tp);
  }
  throw std::invalid_argument("make_cuda_inference_model: unknown precision");
}

std::unique_ptr<InferenceModel> make_cuda_inference_model(const CheckpointModel& checkpoint, Precision precision,
                                                          int slots, int max_length, Comm* tp) {
  return make_cuda_inference_model(checkpoint, precision, slots, max_length, CudaInferenceOptions{}, tp);
}

}  // namespace meg
