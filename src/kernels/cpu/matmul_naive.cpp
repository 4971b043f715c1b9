// Naive matmul references: the oracle the oneDNN and quantized kernels are tested against.
// Plain loops over f32 copies of the operands (quantized weights dequantized by the core
// reference), accumulating in double.
#include <vector>

#include "core/error.h"
#include "kernels/cpu/matmul.h"

namespace tensorpar {

void matmul_naive(Tensor& c, const Tensor& a, const Tensor& b, const Tensor* bias, float alpha,
                  float beta) {
  const int nd = c.ndim();
  TP_CHECK(nd >= 2 && a.ndim() == nd && b.ndim() == nd, "[matmul_naive] ranks: got a ",
           a.describe(), ", b ", b.describe(), ", c ", c.describe());
  const int64_t M = a.dim(-2), K = a.dim(-1), N = b.dim(-1);
  TP_CHECK(b.dim(-2) == K && c.dim(-2) == M && c.dim(-1) == N, "[matmul_naive] shapes: got a ",
           a.describe(), " x b ", b.describe(), " -> c ", c.describe());
  TP_CHECK(!bias || (bias->ndim() == 1 && bias->dim(0) == N), "[matmul_naive] bias: got ",
           bias ? bias->describe() : "", ", expected (", N, ")");
  const std::vector<float> av = a.to_vector(), bv = b.to_vector();
  std::vector<float> cv = beta != 0.0f ? c.to_vector() : std::vector<float>(size_t(c.numel()));
  const std::vector<float> biasv = bias ? bias->to_vector() : std::vector<float>();
  int64_t batches = 1;
  for (int d = 0; d < nd - 2; ++d) batches *= c.dim(d);
  for (int64_t bi = 0; bi < batches; ++bi) {
    // Batch offsets of a and b, broadcasting their size-1 dims.
    int64_t rem = bi, a_off = 0, b_off = 0, a_mul = 1, b_mul = 1;
    for (int d = nd - 3; d >= 0; --d) {
      const int64_t idx = rem % c.dim(d);
      rem /= c.dim(d);
      if (a.dim(d) != 1) a_off += idx * a_mul;
      if (b.dim(d) != 1) b_off += idx * b_mul;
      a_mul *= a.dim(d);
      b_mul *= b.dim(d);
    }
    const float* ap = av.data() + a_off * M * K;
    const float* bp = bv.data() + b_off * K * N;
    float* cp = cv.data() + bi * M * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += double(ap[m * K + k]) * double(bp[k * N + n]);
        double v = double(alpha) * acc + (bias ? double(biasv[size_t(n)]) : 0.0);
        if (beta != 0.0f) v += double(beta) * double(cp[m * N + n]);
        cp[m * N + n] = float(v);
      }
  }
  c.copy_from(Tensor::from_f32(c.shape(), cv, DType::kF32));
}

void matmul_forward_naive(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) {
  TP_CHECK(in.ndim() >= 1 && weight.ndim() == 2 && weight.dim(1) == in.dim(-1),
           "[matmul_forward_naive] got in ", in.describe(), ", weight ", weight.describe());
  const int64_t K = in.dim(-1), M = K == 0 ? 0 : in.numel() / K;
  Tensor in2 = in.contiguous().reshape({M, K});
  Tensor out2 = Tensor::empty({M, weight.dim(0)}, DType::kF32);
  const Tensor wt = weight.to(DType::kF32).transpose(0, 1);  // (K,N)
  matmul_naive(out2, in2, wt, bias);
  out.copy_from(out2.reshape(out.shape()));
}

void matmul_backward_naive(Tensor* d_in, Tensor* d_weight, Tensor* d_bias, const Tensor& d_out,
                           const Tensor& in, const Tensor& weight) {
  const int64_t K = in.dim(-1), N = weight.dim(0), M = K == 0 ? 0 : in.numel() / K;
  const Tensor x = in.contiguous().reshape({M, K});
  const Tensor dy = d_out.contiguous().reshape({M, N});
  const Tensor w = weight.to(DType::kF32);
  if (d_in) {
    Tensor dx = Tensor::empty({M, K}, DType::kF32);
    dx.copy_from(d_in->contiguous().reshape({M, K}));
    matmul_naive(dx, dy, w, nullptr, 1.0f, 1.0f);
    d_in->copy_from(dx.reshape(d_in->shape()));
  }
  if (d_weight) matmul_naive(*d_weight, dy.transpose(0, 1), x, nullptr, 1.0f, 1.0f);
  if (d_bias) {
    const std::vector<float> g = dy.to_vector();
    std::vector<float> db = d_bias->to_vector();
    for (int64_t n = 0; n < N; ++n) {
      double acc = db[size_t(n)];
      for (int64_t m = 0; m < M; ++m) acc += g[size_t(m * N + n)];
      db[size_t(n)] = float(acc);
    }
    d_bias->copy_from(Tensor::from_f32(d_bias->shape(), db));
  }
}

}  // namespace tensorpar
