// CausalLM: one rank's shard of a decoder-only language model, the interface the generation
// loop (src/infer/) and the trainer (src/train/) are written against. Logits stay Sharded over
// the vocab (this rank holds columns vocab_range()); no call gathers the whole vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "parallel/partition.h"

namespace tensorpar {

// Keys and values of one sequence for this rank's KV heads, every layer.
class KvCache {
 public:
  virtual ~KvCache() = default;
  virtual int64_t length() const = 0;    // tokens stored (the next token's position)
  virtual int64_t capacity() const = 0;  // tokens it can hold
  virtual void truncate(int64_t length) = 0;  // forget tokens [length, ...); length <= length()
  virtual int64_t bytes() const = 0;     // memory held on this rank
};

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
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  virtual Communicator& tp() = 0;
  // Vocab columns [begin, end) of this rank's logits; they tile [0, V) over the TP group.
  virtual Range vocab_range() const = 0;
  // An empty cache for up to max_tokens tokens of one sequence.
  virtual std::unique_ptr<KvCache> make_cache(int64_t max_tokens) const = 0;
  // Runs tokens (T) at positions [cache.length(), cache.length() + T) and appends them to the
  // cache. logits_local: (T, V_local) f32, or (1, V_local) for the last token only when
  // last_only. Collective over tp(): every rank calls it with the same tokens.
  virtual void forward(Tensor& logits_local, std::span<const int32_t> tokens, KvCache& cache,
                       bool last_only) = 0;

  // Training. tokens and targets (B, T) i64 (targets may hold -100: ignored). Runs forward and
  // backward, ACCUMULATING gradients scaled by loss_scale (e.g. 1 / micro-batches); returns the
  // mean loss, identical on every TP rank.
  virtual float forward_backward(const Tensor& tokens, const Tensor& targets, float loss_scale) = 0;
  // Mean loss without gradients (evaluation).
  virtual float forward_loss(const Tensor& tokens, const Tensor& targets) = 0;
  virtual void set_train_compute(const TrainCompute& compute) = 0;
  virtual std::vector<ParamShard> parameters() = 0;
  virtual void zero_grad() = 0;
  // Bytes of weights held on this rank.
  virtual int64_t weight_bytes() const = 0;
};

}  // namespace tensorpar
