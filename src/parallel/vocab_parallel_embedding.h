// VocabParallelEmbedding: the token table (V, C) split by vocab rows over the TP group. Each
// rank looks up the ids it owns and writes zeros for the rest; an all-reduce completes the
// lookup (output Replicated). Backward is local: each rank scatters into its own rows.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "parallel/partition.h"
#include "parallel/slice_loader.h"

namespace tensorpar {

class VocabParallelEmbedding {
 public:
  // Rows vocab_range(vocab, tp_size, tp_rank). `vocab` may be a padded size; ids must be below
  // it (a model with a padded table checks its real vocab itself).
  VocabParallelEmbedding(int64_t vocab, int64_t dim, int tp_size, int tp_rank);

  int64_t vocab() const { return vocab_; }
  int64_t dim() const { return dim_; }
  Range vocab_range() const { return range_; }
  int64_t vocab_local() const { return range_.size(); }

  // (vocab_local, C): f32 (training), or bf16/f16/block-quantized as loaded (inference; a tied
  // LM head multiplies by the same table).
  Tensor& weight() { return weight_; }
  const Tensor& weight() const { return weight_; }
  // Inference: the table in the layout a tied LM head's kernel reads (packed_weights.h: a
  // packable GGUF table row-packed while on, its GGUF layout again when off; a bf16/f16 table in
  // panels where this CPU prefers them); rows are looked up through that layout.
  void set_row_packed(bool on);
  // (vocab_local, C) f32, allocated and zeroed by the first backward; accumulates.
  Tensor& d_weight() { return d_weight_; }
  void zero_grad();

  // Takes rows vocab_range() of the full table (V, C) in the loader's dtype.
  void load(const SliceLoader& table);
  // This rank's rows of a full N(0, stddev^2) table (init_normal_sliced).
  void init_normal(float stddev, uint64_t seed, uint64_t tensor_id);

  // out (N, C) f32 = table[ids (N) i64], all-reduced over tp. Ids outside [0, V) throw.
  void forward(Tensor& out, const Tensor& ids, Communicator& tp) const;
  void forward(Tensor& out, const int64_t* ids, int64_t n, Communicator& tp) const;
  // d_weight (vocab_local, C) += rows of d_out (N, C) whose ids this rank owns. No communication.
  // Needs an f32 table.
  void backward(const Tensor& d_out, const Tensor& ids);
  void backward(const Tensor& d_out, const int64_t* ids, int64_t n);

 private:
  int64_t vocab_ = 0, dim_ = 0;
  int tp_size_ = 1, rank_ = 0;
  Range range_;
  Tensor weight_, d_weight_;
};

}  // namespace tensorpar
