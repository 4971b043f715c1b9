// ParallelMlp: the feed-forward block split over the ffn dim. SwiGLU (Llama family): gate and up
// fused into one column-parallel GEMM (this rank's output row: [gate F_local | up F_local]),
// silu(gate) * up, down row-parallel; GeGLU (Gemma) the same with gelu_tanh(gate). GELU (GPT-2): c_fc column-parallel with bias, gelu_tanh,
// c_proj row-parallel with bias. One all-reduce forward (after down), one backward (the input
// gradient). Input and output Replicated (N, C).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/cpu/matmul.h"
#include "parallel/column_parallel_linear.h"
#include "parallel/partition.h"
#include "parallel/row_parallel_linear.h"

namespace tensorpar {

enum class MlpKind : uint8_t { kSwiGlu, kGeluTanh, kGeGlu };

// Kept for backward (training) or scratch (inference; buffers only grow): `pre` is the column
// layer's output, (N, 2 F_local) [gate | up] for SwiGLU and GeGLU or (N, F_local) for GELU; `h` (N,
// F_local) the activation fed to down.
struct MlpActs {
  Tensor pre, h;
};

class ParallelMlp {
 public:
  // ffn_ranges: rows of the ffn dim per rank, tiling [0, ffn) (see mlp_ffn_ranges).
  ParallelMlp(int64_t hidden, int64_t ffn, MlpKind kind, bool bias, std::vector<Range> ffn_ranges,
              int tp_rank);

  MlpKind kind() const { return kind_; }
  int64_t ffn_local() const { return ffn_range().size(); }
  Range ffn_range() const { return in_.part_range(0); }
  // SwiGLU, GeGLU: parts 0 = gate_proj, 1 = up_proj; GELU: part 0 = c_fc.
  ColumnParallelLinear& in() { return in_; }
  RowParallelLinear& down() { return down_; }  // down_proj / c_proj
  const RowParallelLinear& down() const { return down_; }
  int64_t weight_bytes() const;
  void zero_grad();
  // Allocates the (zero) gradients a first backward would: for an expert that got no tokens.
  void allocate_grads();

  // out (N, C) Replicated = MLP(x (N, C)); acts hold the intermediates (grown here as needed).
  void forward(MatmulEngine& eng, Tensor& out, const Tensor& x, MlpActs& acts, Communicator& tp) const;
  // d_x (N, C) written (all-reduced); weight grads accumulate. With `async` (a CommThread over
  // tp) the all-reduce overlaps the first layer's weight gradient.
  void backward(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x, const MlpActs& acts,
                Communicator& tp, CommThread* async = nullptr);
  // The same two without communication, for blocks that sum several MLPs with one all-reduce
  // (the experts of an MoE layer): out (N, C) = this rank's Partial output (no bias: a biased
  // MLP adds it after the reduction); d_x (N, C) += this rank's Partial input gradient.
  void forward_partial(MatmulEngine& eng, Tensor& out, const Tensor& x, MlpActs& acts) const;
  // `input_done`, when given, is called once d_x has this MLP's part, before the first layer's
  // weight gradient.
  void backward_partial(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x, const MlpActs& acts,
                        const std::function<void()>& input_done = {});

 private:
  // acts.h (N, F_local) = the activation of in(x); returns it.
  Tensor activate(MatmulEngine& eng, const Tensor& x, MlpActs& acts) const;
  // The gradient of in()'s output (N, out_local) from d_out, down's weight grads accumulated.
  Tensor d_pre(MatmulEngine& eng, const Tensor& d_out, const Tensor& x, const MlpActs& acts);

  MlpKind kind_;
  ColumnParallelLinear in_;
  RowParallelLinear down_;
};

// The ffn split: partition_even over blocks of `align` (e.g. 32 so quantized down_proj columns
// cut at block boundaries) when ffn is a multiple of it, else partition_even of ffn.
std::vector<Range> mlp_ffn_ranges(int64_t ffn, int tp_size, int64_t align);

}  // namespace tensorpar
