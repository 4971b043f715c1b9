// Matrix multiply, the one kernel that talks to oneDNN. `MatmulEngine` (one per rank) owns the
// oneDNN engine/stream, a cache of primitives per shape/dtype/thread count, and scratch buffers,
// so repeated calls cost a hash lookup. Kernels use the calling thread's OpenMP team size.
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace tensorpar {

// Per-rank matmul context. Not thread-safe: each rank (thread) owns its own.
class MatmulEngine {
 public:
  MatmulEngine();
  ~MatmulEngine();
  MatmulEngine(const MatmulEngine&) = delete;
  MatmulEngine& operator=(const MatmulEngine&) = delete;

  // Number of cached oneDNN primitives (for tests: repeated shapes must not grow it).
  int64_t cached_primitives() const;
  void clear_cache();
  // A scratch buffer of at least nbytes, 64-byte aligned, owned by the engine; `slot` picks one
  // of a few independent buffers (contents are kept until the slot is asked for more bytes).
  void* scratch(int slot, int64_t nbytes);
  static constexpr int kScratchSlots = 8;  // 0-3: quant_matmul; 0-2 and 5-7: matmul; 4: bf16 activations

  // The dtype matmul_forward/matmul_backward multiply f32 weights and activations in: kF32
  // (default) or kBF16 (both operands rounded to bf16, f32 accumulation, outputs and gradients
  // still f32: mixed precision with f32 master weights). Weights already bf16 or quantized are
  // unaffected; matmul() itself always takes its operands as given.
  void set_compute_dtype(DType dtype);
  DType compute_dtype() const { return compute_; }

  // Row-invariant mode (inference): matmul_forward computes every output row with kernels whose
  // arithmetic for a row does not depend on how many rows share the call (rowwise_matmul.h, for
  // float and block-quantized weights; amx_matmul.h / avx512bf16_matmul.h for bf16 weights where the CPU has AMX / AVX512-BF16,
  // int8_matmul.h for most GGUF block types where it has AVX2 or AVX512-VNNI), so a
  // sequence's logits are bitwise the same alone or in any batch. Off (oneDNN, and the fused few-row kernel for quantized weights) for training.
  void set_row_invariant(bool on) { row_invariant_ = on; }
  bool row_invariant() const { return row_invariant_; }
  // In row-invariant mode, block-quantized weights multiply activations rounded to 8 bits
  // (int8_matmul.h, llama.cpp's numerics) where the CPU has the kernel; false keeps f32
  // activations (rowwise_matmul.h: slower, a little more accurate). On by default.
  void set_int8_activations(bool on) { int8_activations_ = on; }
  bool int8_activations() const { return int8_activations_; }

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
  DType compute_ = DType::kF32;
  bool row_invariant_ = false;
  bool int8_activations_ = true;
};

// c (...,M,N) = alpha * a (...,M,K) x b (...,K,N) [+ bias (N)] + beta * c.
// a, b, c may be strided views (e.g. `w.transpose(0, 1)` for a transposed operand); 2 to 6 dims,
// all the same rank; batch dims of a and b equal c's or are 1 (broadcast). a and b are both f32
// or both bf16 (bf16 accumulates in f32); c is f32 or bf16 (f32 inputs with a bf16 c go through
// f32 scratch, oneDNN lacks that mix; bf16 operands on a CPU where oneDNN has no bf16 matmul are
// widened to f32 first, the same arithmetic); bias (may be null) f32, contiguous.
void matmul(MatmulEngine& eng, Tensor& c, const Tensor& a, const Tensor& b, const Tensor* bias,
            float alpha = 1.0f, float beta = 0.0f);

// Whether inference keeps f32, bf16 and f16 weights in K-major panels (panel_matmul.h) on this
// CPU: an AVX2 CPU without AVX-512, AMX or AVX512-BF16, or TENSORPAR_BF16_KERNEL=panels (see
// matmul.cpp).
bool panels_preferred();

// Whether oneDNN multiplies bf16 operands on this CPU (AVX-512 or AMX, or AVX2 with VNNI-2; not
// an AVX2-only CPU).
bool onednn_has_bf16_matmul();

// out (..,N) = in (..,K) x weight^T + bias, weight (N,K) in the HF [out,in] layout.
// in: f32 or bf16 (converted to weight's dtype when the weight is f32/bf16 and they differ);
// weight: f32, bf16, or any block quant (dequantized block-wise on the fly, see quant_matmul.h);
// bias (N) f32 or null; out f32 or bf16. Leading dims of in/out flatten to M rows (they must be
// contiguous unless 2-D, where any row stride works).
void matmul_forward(MatmulEngine& eng, Tensor& out, const Tensor& in, const Tensor& weight,
                    const Tensor* bias);
// Gradients accumulate (the caller zeroes them); any of d_in, d_weight, d_bias may be null.
// d_in (M,K) += d_out (M,N) x weight (N,K); d_weight (N,K) += d_out^T x in; d_bias (N) += row
// sums of d_out. Quantized weights are frozen: only d_in is allowed for them.
void matmul_backward(MatmulEngine& eng, Tensor* d_in, Tensor* d_weight, Tensor* d_bias,
                     const Tensor& d_out, const Tensor& in, const Tensor& weight);

// Naive references (the oracle in tests): plain loops, accumulate in double, any float or
// quantized weight dtype, same shape rules as the fast kernels.
void matmul_naive(Tensor& c, const Tensor& a, const Tensor& b, const Tensor* bias,
                  float alpha = 1.0f, float beta = 0.0f);
void matmul_forward_naive(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias);
void matmul_backward_naive(Tensor* d_in, Tensor* d_weight, Tensor* d_bias, const Tensor& d_out,
                           const Tensor& in, const Tensor& weight);

}  // namespace tensorpar
