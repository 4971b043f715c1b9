// Helpers for the TP tests: run a function on n thread ranks (one compute thread each, a short
// comm timeout so a bug fails instead of hanging), shard/unshard plain row-major vectors, and
// compare with a relative tolerance, central-difference gradients. Rank functions store results;
// the main thread checks them.
#pragma once

#include <functional>
#include <vector>

#include "comm/launch.h"
#include "core/tensor.h"
#include "parallel/partition.h"
#include "test_util.h"

namespace tensorpar::testing {

// Central difference (double) of `loss` w.r.t. every element of `p`, which the loss reads by
// reference (each element is nudged in place and restored).
inline std::vector<float> numeric_grad(std::vector<double>& p, const std::function<double()>& loss) {
  std::vector<float> g(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const double keep = p[i], e = 1e-5;
    p[i] = keep + e;
    const double lp = loss();
    p[i] = keep - e;
    const double lm = loss();
    p[i] = keep;
    g[i] = float((lp - lm) / (2 * e));
  }
  return g;
}

inline void run_ranks(int n, const std::function<void(Communicator&)>& fn) {
  LaunchConfig cfg;
  cfg.backend = Backend::kThreads;
  cfg.n_ranks = n;
  cfg.threads_per_rank = 1;
  cfg.comm = CommOptions::from_env();  // TENSORPAR_COMM_TIMEOUT (scripts/test.sh: 60 s)
  launch_ranks(cfg, fn);
}

// Columns [r.begin, r.end) of a row-major (rows, cols) matrix.
inline std::vector<float> columns(const std::vector<float>& m, int64_t rows, int64_t cols, Range r) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(rows * r.size()));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = r.begin; j < r.end; ++j) out.push_back(m[static_cast<size_t>(i * cols + j)]);
  return out;
}

// Rows [r.begin, r.end) of a row-major matrix with `cols` columns.
inline std::vector<float> rows_of(const std::vector<float>& m, int64_t cols, Range r) {
  return std::vector<float>(m.begin() + r.begin * cols, m.begin() + r.end * cols);
}

inline Tensor tensor_of(const Shape& shape, const std::vector<float>& v) {
  // Empty shards are made directly (Tensor::from_f32 memcpy's from a null pointer for them).
  if (v.empty()) return Tensor::empty(shape, DType::kF32);
  return Tensor::from_f32(shape, v);
}

inline Tensor ids_tensor(const std::vector<int64_t>& ids) {
  Tensor t = Tensor::empty({static_cast<int64_t>(ids.size())}, DType::kI64);
  for (size_t i = 0; i < ids.size(); ++i) t.data<int64_t>()[i] = ids[i];
  return t;
}

// max |a-b| / max(|b|, 0.1) <= tol, with a readable failure.
#define EXPECT_CLOSE(a, b, tol)                                                     \
  do {                                                                              \
    const double err_ = ::tensorpar::testing::max_rel_diff((a), (b), 0.1);             \
    EXPECT_LE(err_, (tol)) << #a << " vs " << #b;                                   \
  } while (0)

}  // namespace tensorpar::testing
