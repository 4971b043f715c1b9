// CausalLM: one rank's shard of a decoder-only language model, the interface the generation
// loop (src/infer/) and the trainer (src/train/) are written against. Logits stay Sharded over
// the vocab (this rank holds columns vocab_range()); no call gathers the whole vocabulary.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "parallel/partition.h"

namespace tensorpar {

// This rank's keys and values in fixed-size blocks, every layer: k(l) is (n_blocks, NKV_local,
// HS, block_size) (keys transposed within a block), v(l) (n_blocks, block_size, NKV_local, HS),
// of dtype() (f32, or f16: half the memory, see paged_attention.h). Which blocks belong to which
// sequence is the caller's business (a block table per sequence): one sequence (KvCache below)
// or many (the serving engine).
class KvPool {
 public:
  KvPool(int64_t n_layers, int64_t n_blocks, int64_t block_size, int64_t kv_local, int64_t head_dim,
         DType dtype = DType::kF32);
  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  void* k(int64_t layer) { return k_[size_t(layer)].raw(); }
  void* v(int64_t layer) { return v_[size_t(layer)].raw(); }
  int64_t bytes() const;

 private:
  int64_t n_blocks_ = 0, block_size_ = 0;
  DType dtype_ = DType::kF32;
  std::vector<Tensor> k_, v_;
};

// Which logits rows a sequence of a batched forward wants.
enum class LogitRows : uint8_t { kNone, kLast, kAll };

// One sequence's part of a batched forward: `tokens` at positions [pos0, pos0 + T), keys and
// values read from and written to the pool blocks `blocks` (block i holds positions
// [i*block_size, (i+1)*block_size); they must cover [0, pos0 + T)).
struct SeqChunk {
  std::span<const int32_t> tokens;
  int64_t pos0 = 0;
  std::span<const int32_t> blocks;
  LogitRows logits = LogitRows::kLast;
};

// The logits rows a chunk asks for.
inline int64_t logit_rows(const SeqChunk& c) {
  return c.logits == LogitRows::kAll ? int64_t(c.tokens.size()) : c.logits == LogitRows::kLast ? 1 : 0;
}

// Keys and values of one sequence: a pool of its own with blocks 0, 1, ... in order.
class KvCache {
 public:
  KvCache(std::unique_ptr<KvPool> pool, int64_t capacity);
  int64_t length() const { return length_; }      // tokens stored (the next token's position)
  int64_t capacity() const { return capacity_; }   // tokens it can hold
  void truncate(int64_t length);                   // forget tokens [length, ...); length <= length()
  int64_t bytes() const { return pool_->bytes(); } // memory held on this rank
  KvPool& pool() { return *pool_; }
  std::span<const int32_t> blocks() const { return blocks_; }
  void set_length(int64_t n) { length_ = n; }

 private:
  std::unique_ptr<KvPool> pool_;
  std::vector<int32_t> blocks_;
  int64_t capacity_ = 0, length_ = 0;
};

// The parts of a model whose gradients backward completes one after another (ParamShard::
// grad_part): the final norm and LM head first (kHeadGrads), then each layer by its index from
// the last, then the embedding and anything else at the end of backward (kEndGrads).
inline constexpr int64_t kHeadGrads = -1;
inline constexpr int64_t kEndGrads = -2;
// A part no backward reports: a trainer holds these gradients until backward has returned (a
// tied embedding's pipeline copies, summed between the stages first, under ZeRO-1).
inline constexpr int64_t kHeldGrads = -3;

// A sort key for parts in the order backward completes them (held parts after everything).
inline std::pair<int, int64_t> backward_position(int64_t part) {
  if (part == kHeadGrads) return {0, 0};
  if (part == kEndGrads) return {2, 0};
  if (part == kHeldGrads) return {3, 0};
  return {1, -part};
}

// A parameter shard as a trainer and a checkpoint see it.
struct ParamShard {
  std::string name;     // the HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
  Tensor* value = nullptr;  // this rank's part
  Tensor* grad = nullptr;   // same shape, f32; null when frozen
  Shape global_shape;       // the full tensor's shape
  int shard_dim = -1;       // -1: Replicated (every TP rank holds all of it)
  Range range;              // [begin, end) along shard_dim held here
  // TP ranks holding this same shard: tp.size() for Replicated; > 1 also for k/v projections
  // when tp > n_kv_heads (kv heads replicated). Their gradients are already identical on
  // every holder; a global norm counts such a shard once (weight 1 / copies per rank).
  int copies = 1;
  // An expert's shard under expert parallelism carved out of data parallelism: the EP ranks hold
  // different experts, so its gradient is summed over the expert-data-parallel group (not DP)
  // and the global norm and checkpoints gather it over the EP group.
  bool expert = false;
  // Which part's backward completes this gradient for a micro-batch: a layer's index,
  // kHeadGrads or kEndGrads (see CausalLM::set_backward_hook).
  int64_t grad_part = kEndGrads;
};

// How training steps (forward_backward, forward_loss) compute; inference ignores it.
struct TrainCompute {
  // kBF16: every matmul (projections, MLP, LM head, forward and backward) rounds its operands to
  // bf16 and accumulates in f32; master weights, gradients, optimizer state, norms, attention
  // scores and the loss stay f32 (no loss scaling needed: bf16 has f32's exponent range).
  DType matmul_dtype = DType::kF32;
  // Activation recomputation, per layer: the first N layers (every layer when N >= layers) keep
  // only their input in forward and run their forward again just before their backward (its
  // all-reduces too). Gradients are identical; saved activations drop to one (N, C) per layer.
  int64_t recompute_layers = 0;
  // Mixture-of-experts models: the weight of the auxiliary load-balancing loss added to the
  // cross-entropy (the Switch/Mixtral form over all MoE layers' tokens, as transformers computes
  // it); < 0: the model config's router_aux_loss_coef.
  double moe_aux_loss_coef = -1;
  // The router z-loss of ST-MoE: coef * mean over all MoE layers' tokens of logsumexp(router
  // logits)^2, added to the loss (0: none).
  double moe_z_loss_coef = 0;
  // Expert capacity in training: each expert takes at most ceil(factor * tokens * k / experts)
  // of a forward's routed slots (first choices first), the rest dropped; 0: dropless, as at
  // inference (which ignores it).
  double moe_capacity_factor = 0;
  // Sequence parallelism (Megatron-SP) over the TP group: norms and residual adds on this rank's
  // rows of the B*T only, all-gather before and reduce-scatter after each TP region instead of
  // the all-reduce (see SequenceParallelScratch). Same losses and gradients up to the order of
  // a few sums; less activation memory per rank. Dense layers only.
  bool sequence_parallel = false;
  // With tp > 1: each layer's backward all-reduces the input gradient of attention and of a
  // dense MLP on a thread of its own (comm/comm_thread.h) while the q/k/v and gate/up weight
  // gradients are computed, instead of before them. The same sums: identical results.
  bool overlap_tp_backward = true;
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  virtual Communicator& tp() = 0;
  // Every rank of this model: tp() for a whole model, tp x pp for pipeline stages (StagedModel).
  // Its rank 0 leads: it alone reads input and prints; what every rank must agree on (prompt
  // ids, stop verdicts) is broadcast over it. Vocab shards are gathered over tp().
  virtual Communicator& control() { return tp(); }
  // Vocab columns [begin, end) of this rank's logits; they tile [0, V) over the TP group.
  virtual Range vocab_range() const = 0;
  // A KV pool of n_blocks blocks of block_size tokens on this rank (every rank of the group
  // must make the same n_blocks and block_size).
  virtual std::unique_ptr<KvPool> make_kv_pool(int64_t n_blocks, int64_t block_size) const = 0;
  // Bytes a pool holds per token on this rank (sizing a pool from a memory budget).
  virtual int64_t kv_bytes_per_token() const = 0;
  // The inference forward, for one sequence or many at once: every sequence's tokens run at
  // their own positions (rows of all sequences share each projection, norm and all-reduce;
  // attention reads each sequence's own blocks) and their keys/values are written to the pool.
  // logits_local: (R, V_local) f32, R = the logits rows the chunks ask for, in chunk order.
  // Row-invariant: a sequence's logits are bitwise the same whatever other chunks share the
  // call. Collective over tp(): every rank passes the same chunks.
  virtual void forward_batch(Tensor& logits_local, std::span<const SeqChunk> seqs, KvPool& pool) = 0;

  // An empty cache for up to max_tokens tokens of one sequence.
  std::unique_ptr<KvCache> make_cache(int64_t max_tokens) const;
  // One sequence: tokens (T) at positions [cache.length(), cache.length() + T), appended to the
  // cache. logits_local: (T, V_local) f32, or (1, V_local) for the last token only when
  // last_only. Collective over tp().
  void forward(Tensor& logits_local, std::span<const int32_t> tokens, KvCache& cache, bool last_only);

  // Training. tokens and targets (B, T) i64 (targets may hold -100: ignored). Runs forward and
  // backward, ACCUMULATING gradients scaled by loss_scale (e.g. 1 / micro-batches); returns the
  // mean loss, identical on every TP rank.
  virtual float forward_backward(const Tensor& tokens, const Tensor& targets, float loss_scale) = 0;
  // Mean loss without gradients (evaluation).
  virtual float forward_loss(const Tensor& tokens, const Tensor& targets) = 0;
  // Collective over the TP group (every rank calls it, with the same settings): the first call
  // with overlap_tp_backward and tp > 1 starts the CommThread that the overlap uses.
  virtual void set_train_compute(const TrainCompute& compute) = 0;
  // Training: backward calls hook(part) each time the gradients of a part (ParamShard::grad_part)
  // have received this micro-batch's contribution (kEndGrads last), so that a trainer can
  // reduce them while backward goes on. Empty: none. A model that never calls it is still right
  // for such a trainer (everything is final once backward returns), only not overlapped.
  virtual void set_backward_hook(std::function<void(int64_t part)> hook) { (void)hook; }
  // Bytes of this rank's training activations: what forward keeps for backward and the step's
  // scratch, over every micro-batch held. The buffers only grow, so after a step it is the peak.
  virtual int64_t activation_bytes() const = 0;
  // Inference with block-quantized weights: activations rounded to 8 bits for the integer
  // kernel where the CPU has it (true, the default: llama.cpp's numerics, faster), or kept f32.
  // Called at all, it also arranges the weights as the inference kernels read them fastest
  // (packed_weights.h: block-quantized ones row-packed for the int8 kernel when true, bf16/f16
  // ones in K-major panels on AVX2 CPUs either way), so inference calls it once after loading;
  // training must not (the packed layouts are for inference kernels only). A model without such
  // weights ignores it.
  virtual void set_int8_activations(bool /*on*/) {}
  // Inference: the dtype pools made from now on store keys and values in: kF32 (default) or
  // kF16 (half the memory; scores computed as llama.cpp does, see paged_attention.h).
  virtual void set_kv_dtype(DType /*dtype*/) {}
  virtual std::vector<ParamShard> parameters() = 0;
  virtual void zero_grad() = 0;
  // Bytes of weights held on this rank.
  virtual int64_t weight_bytes() const = 0;
  // Mixture-of-experts models: per MoE layer, the top-k slots routed to each expert by the last
  // training forward on this rank's tokens (empty for a dense model).
  virtual std::vector<std::vector<double>> expert_load() const { return {}; }
};

}  // namespace tensorpar
