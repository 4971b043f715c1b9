// ParallelMlp: the feed-forward block split over the ffn dim. SwiGLU (Llama family): gate and up
// column-parallel, silu(gate) * up, down row-parallel. GELU (GPT-2): c_fc column-parallel with
// bias, gelu_tanh, c_proj row-parallel with bias. One all-reduce forward (after down), one
// backward (the input gradient). Input and output Replicated (N, C).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/cpu/matmul.h"
#include "parallel/column_parallel_linear.h"
#include "parallel/partition.h"
#include "parallel/row_parallel_linear.h"

namespace tensorpar {

enum class MlpKind : uint8_t { kSwiGlu, kGeluTanh };

// Saved for backward (training) or scratch (inference): (N, F_local) each. `gate` is unused by
// GELU; `pre` is up (SwiGLU) or the c_fc output (GELU); `h` is the activation fed to down.
struct MlpActs {
  Tensor gate, pre, h;
};

class ParallelMlp {
 public:
  // ffn_ranges: rows of the ffn dim per rank, tiling [0, ffn) (see mlp_ffn_ranges).
  ParallelMlp(int64_t hidden, int64_t ffn, MlpKind kind, bool bias, std::vector<Range> ffn_ranges,
              int tp_rank);

  MlpKind kind() const { return kind_; }
  int64_t ffn_local() const { return up_.out_local(); }
  ColumnParallelLinear& gate() { return gate_; }  // SwiGLU only
  ColumnParallelLinear& up() { return up_; }      // SwiGLU up_proj / GELU c_fc
  RowParallelLinear& down() { return down_; }     // down_proj / c_proj
  int64_t weight_bytes() const;
  void zero_grad();

  // out (N, C) Replicated = MLP(x (N, C)); acts hold (N, F_local) buffers (resized here when
  // the shape changes; at inference pass persistent scratch, so no allocation per token).
  void forward(MatmulEngine& eng, Tensor& out, const Tensor& x, MlpActs& acts, Communicator& tp) const;
  // d_x (N, C) written (all-reduced); weight grads accumulate.
  void backward(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x, const MlpActs& acts,
                Communicator& tp);

 private:
  MlpKind kind_;
  ColumnParallelLinear gate_, up_;
  RowParallelLinear down_;
};

// The ffn split: partition_even over blocks of `align` (e.g. 32 so quantized down_proj columns
// cut at block boundaries) when ffn is a multiple of it, else partition_even of ffn.
std::vector<Range> mlp_ffn_ranges(int64_t ffn, int tp_size, int64_t align);

}  // namespace tensorpar
