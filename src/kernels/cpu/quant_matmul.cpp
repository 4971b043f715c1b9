// Quantized-weight matmul drivers. Few rows: the fused dequant-dot kernel, parallel over weight
// rows (N) with the calling thread's OpenMP team. Many rows: W is dequantized a tile of rows at
// a time into bf16/f32 scratch and multiplied by oneDNN through matmul(); never the whole W.
#include "kernels/cpu/quant_matmul.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "kernels/cpu/quant_matmul_kernels.h"

namespace tensorpar {

namespace quant_detail {

void dot_scalar(const void* w, DType t, int64_t nb, const float* x, int64_t ldx,
                const float* /*xsum*/, int64_t /*ldxs*/, int rows, float* res) {
  const int64_t bb = dtype_block_bytes(t), be = dtype_block_elems(t);
  double acc[kMaxRows] = {};
  float blk[kKQuantBlock];
  for (int64_t b = 0; b < nb; ++b) {
    dequantize_row(blk, static_cast<const char*>(w) + b * bb, t, be);
    for (int r = 0; r < rows; ++r) {
      float s = 0.0f;
      for (int64_t j = 0; j < be; ++j) s += blk[j] * x[r * ldx + b * be + j];
      acc[r] += s;
    }
  }
  for (int r = 0; r < rows; ++r) res[r] = float(acc[r]);
}

}  // namespace quant_detail

namespace {

using namespace quant_detail;

// Scratch slots of the engine (matmul_forward uses slot 0 only for float weights).
constexpr int kSlotActs = 0, kSlotTile = 1, kSlotXsum = 2, kSlotOut = 3;

// A quantized (N,K) weight: row n starts at base + n * row_bytes.
struct QuantRows {
  const char* base;
  int64_t row_bytes, n, k, nb;
  DType t;
};

QuantRows quant_rows(const Tensor& w, const char* where) {
  const int64_t be = dtype_block_elems(w.dtype());
  TP_CHECK(w.ndim() == 2 && dtype_is_quantized(w.dtype()) && w.strides()[1] == 1 && w.strides()[0] % be == 0 &&
               w.dim(1) % be == 0,
           "[", where, "] weight: got ", w.describe(),
           ", expected a 2-D block-quantized tensor with whole contiguous blocks per row");
  const int64_t bb = dtype_block_bytes(w.dtype());
  return {static_cast<const char*>(w.raw()), w.strides()[0] / be * bb, w.dim(0), w.dim(1), w.dim(1) / be,
          w.dtype()};
}

QuantIsa resolve(QuantIsa isa) {
  if (isa != QuantIsa::kAuto) return isa;
  static const QuantIsa best = cpu_has_avx512() ? QuantIsa::kAvx512
                               : cpu_has_avx2() ? QuantIsa::kAvx2
                                                : QuantIsa::kScalar;
  return best;
}

void check_io(const Tensor& out, const Tensor& in, const QuantRows& w, const Tensor* bias,
              const char* where) {
  TP_CHECK(in.ndim() == 2 && in.dim(1) == w.k && (in.dtype() == DType::kF32 || in.dtype() == DType::kBF16),
           "[", where, "] in: got ", in.describe(), ", expected f32/bf16 (M,", w.k, ")");
  TP_CHECK(out.ndim() == 2 && out.dim(0) == in.dim(0) && out.dim(1) == w.n &&
               (out.dtype() == DType::kF32 || out.dtype() == DType::kBF16),
           "[", where, "] out: got ", out.describe(), ", expected f32/bf16 (", in.dim(0), ",", w.n, ")");
  TP_CHECK(!bias || (bias->ndim() == 1 && bias->dim(0) == w.n && bias->dtype() == DType::kF32 &&
                     bias->is_contiguous()),
           "[", where, "] bias: got ", bias ? bias->describe() : "", ", expected contiguous f32[",
           w.n, "]");
}

void store(Tensor& out, int64_t m, int64_t n, float v, float beta) {
  const int64_t off = m * out.strides()[0] + n * out.strides()[1];
  if (out.dtype() == DType::kF32) {
    float* p = static_cast<float*>(out.raw()) + off;
    *p = beta != 0.0f ? v + beta * *p : v;
  } else {
    bf16* p = static_cast<bf16*>(out.raw()) + off;
    *p = f32_to_bf16(beta != 0.0f ? v + beta * bf16_to_f32(*p) : v);
  }
}

void fused(MatmulEngine& eng, Tensor& out, const Tensor& in, const QuantRows& w, const Tensor* bias,
           float beta, QuantIsa isa) {
  const int64_t M = in.dim(0), K = w.k, nb = w.nb;
  // Activations as contiguous-row f32 (used in place when they already are).
  const float* x;
  int64_t ldx;
  if (in.dtype() == DType::kF32 && in.strides()[1] == 1) {
    x = in.data<float>();
    ldx = in.strides()[0];
  } else {
    float* buf = static_cast<float*>(eng.scratch(kSlotActs, M * K * int64_t(sizeof(float))));
    const int64_t rs = in.strides()[0], cs = in.strides()[1];
    if (in.dtype() == DType::kBF16) {
      const bf16* src = in.data<bf16>();
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) buf[m * K + k] = bf16_to_f32(src[m * rs + k * cs]);
    } else {
      const float* src = in.data<float>();
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) buf[m * K + k] = src[m * rs + k * cs];
    }
    x = buf;
    ldx = K;
  }
  float* xs = nullptr;
  if (quant_has_offset(w.t) && isa != QuantIsa::kScalar) {
    xs = static_cast<float*>(eng.scratch(kSlotXsum, std::max<int64_t>(1, M * nb) * int64_t(sizeof(float))));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t b = 0; b < nb; ++b) {
        float s = 0.0f;
        for (int j = 0; j < kQuantBlock; ++j) s += x[m * ldx + b * kQuantBlock + j];
        xs[m * nb + b] = s;
      }
  }
  const DotFn dot = isa == QuantIsa::kAvx512 ? dot_avx512 : isa == QuantIsa::kAvx2 ? dot_avx2 : dot_scalar;
  const float* bp = bias ? bias->data<float>() : nullptr;
  const int64_t N = w.n;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const char* wrow = w.base + n * w.row_bytes;
    for (int64_t m0 = 0; m0 < M; m0 += kMaxRows) {
      const int rows = int(std::min<int64_t>(kMaxRows, M - m0));
      float res[kMaxRows];
      dot(wrow, w.t, nb, x + m0 * ldx, ldx, xs ? xs + m0 * nb : nullptr, nb, rows, res);
      for (int r = 0; r < rows; ++r) store(out, m0 + r, n, res[r] + (bp ? bp[n] : 0.0f), beta);
    }
  }
}

// Calls fn(n0, n1, tile) for row tiles of W dequantized into `td` ((n1-n0, K), contiguous).
template <typename Fn>
void for_each_tile(MatmulEngine& eng, const QuantRows& w, DType td, Fn&& fn) {
  // ~2 MiB tiles: big enough for oneDNN to run near peak, small enough to stay in cache.
  const int64_t es = td == DType::kBF16 ? 2 : 4;
  const int64_t tile_rows = std::min(w.n, std::max<int64_t>(64, (int64_t(2) << 20) / (w.k * es) / 64 * 64));
  void* buf = eng.scratch(kSlotTile, tile_rows * w.k * es);
  const bool simd = resolve(QuantIsa::kAuto) == QuantIsa::kAvx512;
  for (int64_t n0 = 0; n0 < w.n; n0 += tile_rows) {
    const int64_t n1 = std::min(w.n, n0 + tile_rows);
#pragma omp parallel
    {
      std::vector<float> row;
#pragma omp for schedule(static)
      for (int64_t n = n0; n < n1; ++n) {
        const char* src = w.base + n * w.row_bytes;
        if (td == DType::kBF16) {
          bf16* dst = static_cast<bf16*>(buf) + (n - n0) * w.k;
          if (simd) {
            dequant_bf16_avx512(dst, src, w.t, w.nb);
          } else {
            row.resize(size_t(w.k));
            dequantize_row(row.data(), src, w.t, w.k);
            for (int64_t j = 0; j < w.k; ++j) dst[j] = f32_to_bf16(row[size_t(j)]);
          }
        } else {
          float* dst = static_cast<float*>(buf) + (n - n0) * w.k;
          if (simd) dequant_f32_avx512(dst, src, w.t, w.nb);
          else dequantize_row(dst, src, w.t, w.k);
        }
      }
    }
    fn(n0, n1, Tensor::borrow(buf, {n1 - n0, w.k}, td));
  }
}

// Activations in the tile dtype: bf16 inputs multiply bf16 tiles, f32 inputs f32 tiles.
Tensor acts_as(MatmulEngine& eng, const Tensor& t, DType td) {
  if (t.dtype() == td) return t;
  Tensor c = Tensor::borrow(eng.scratch(kSlotActs, dtype_nbytes(td, t.numel())), t.shape(), td);
  c.copy_from(t);
  return c;
}

}  // namespace

bool quant_isa_supported(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kAvx512: return cpu_has_avx512();
    case QuantIsa::kAvx2: return cpu_has_avx2();
    default: return true;
  }
}

void quant_matmul_forward_fused(MatmulEngine& eng, Tensor& out, const Tensor& in,
                                const Tensor& weight, const Tensor* bias, QuantIsa isa) {
  const QuantRows w = quant_rows(weight, "quant_matmul_forward");
  check_io(out, in, w, bias, "quant_matmul_forward");
  TP_CHECK(quant_isa_supported(isa), "[quant_matmul_forward] this CPU lacks the requested ISA");
  fused(eng, out, in, w, bias, 0.0f, resolve(isa));
}

void quant_matmul_forward_tiled(MatmulEngine& eng, Tensor& out, const Tensor& in,
                                const Tensor& weight, const Tensor* bias, float beta) {
  const QuantRows w = quant_rows(weight, "quant_matmul_forward");
  check_io(out, in, w, bias, "quant_matmul_forward");
  if (out.numel() == 0) return;
  const DType td = in.dtype();
  const Tensor a = acts_as(eng, in, td);
  const int64_t M = in.dim(0);
  for_each_tile(eng, w, td, [&](int64_t n0, int64_t n1, const Tensor& tile) {
    // oneDNN's fast (brgemm) matmul wants a dense output, so each tile lands in dense f32
    // scratch and is then copied into its columns of out.
    Tensor part = Tensor::borrow(eng.scratch(kSlotOut, M * (n1 - n0) * int64_t(sizeof(float))),
                                 {M, n1 - n0}, DType::kF32);
    const Tensor bs = bias ? bias->slice(0, n0, n1) : Tensor();
    matmul(eng, part, a, tile.transpose(0, 1), bias ? &bs : nullptr);
    const float* pp = part.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = n0; n < n1; ++n) store(out, m, n, pp[m * (n1 - n0) + (n - n0)], beta);
  });
}

void quant_matmul_forward(MatmulEngine& eng, Tensor& out, const Tensor& in, const Tensor& weight,
                          const Tensor* bias, float beta) {
  const QuantRows w = quant_rows(weight, "quant_matmul_forward");
  check_io(out, in, w, bias, "quant_matmul_forward");
  if (out.numel() == 0) return;
  if (in.dim(0) <= kQuantFusedMaxRows) {
    fused(eng, out, in, w, bias, beta, resolve(QuantIsa::kAuto));
  } else {
    quant_matmul_forward_tiled(eng, out, in, weight, bias, beta);
  }
}

void quant_matmul_backward_input(MatmulEngine& eng, Tensor& d_in, const Tensor& d_out,
                                 const Tensor& weight) {
  const QuantRows w = quant_rows(weight, "quant_matmul_backward_input");
  TP_CHECK(d_out.ndim() == 2 && d_out.dim(1) == w.n && d_in.ndim() == 2 &&
               d_in.dim(0) == d_out.dim(0) && d_in.dim(1) == w.k,
           "[quant_matmul_backward_input] got d_in ", d_in.describe(), ", d_out ",
           d_out.describe(), " for weight ", weight.describe());
  if (d_in.numel() == 0) return;
  const DType td = d_out.dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32;
  const Tensor g = acts_as(eng, d_out, td);
  for_each_tile(eng, w, td, [&](int64_t n0, int64_t n1, const Tensor& tile) {
    matmul(eng, d_in, g.slice(1, n0, n1), tile, nullptr, 1.0f, 1.0f);
  });
}

}  // namespace tensorpar
