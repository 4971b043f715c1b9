// ColumnParallelLinear and RowParallelLinear at tp 1..4: outputs and gradients against a naive
// double-precision reference and against the tp 1 run, uneven shards and empty shards included.
#include <gtest/gtest.h>

#include "kernels/cpu/int8_matmul.h"
#include "kernels/quant_test_util.h"
#include "parallel/column_parallel_linear.h"
#include "parallel/mappings.h"
#include "parallel/rng.h"
#include "parallel/row_parallel_linear.h"
#include "parallel_test_util.h"

namespace tensorpar {
namespace {

using testing::columns;
using testing::nan_tensor;
using testing::Rng;
using testing::rows_of;
using testing::run_ranks;
using testing::tensor_of;
using PerRank = std::vector<std::vector<float>>;

// The problem: x (N, K), W (M, K), b (M), d_y (N, M), and the reference y, d_x, d_W, d_b.
struct Problem {
  int64_t n, k, m;
  std::vector<float> x, w, b, dy;
  std::vector<float> y, dx, dw, db;

  Problem(int64_t n_, int64_t k_, int64_t m_, uint64_t salt) : n(n_), k(k_), m(m_) {
    Rng rng(salt);
    x = rng.uniform_vec(size_t(n * k));
    w = rng.uniform_vec(size_t(m * k));
    b = rng.uniform_vec(size_t(m));
    dy = rng.uniform_vec(size_t(n * m));
    y.assign(size_t(n * m), 0);
    dx.assign(size_t(n * k), 0);
    dw.assign(size_t(m * k), 0);
    db.assign(size_t(m), 0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = b[size_t(j)];
        for (int64_t l = 0; l < k; ++l) s += double(x[size_t(i * k + l)]) * w[size_t(j * k + l)];
        y[size_t(i * m + j)] = float(s);
      }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t l = 0; l < k; ++l) {
        double s = 0;
        for (int64_t j = 0; j < m; ++j) s += double(dy[size_t(i * m + j)]) * w[size_t(j * k + l)];
        dx[size_t(i * k + l)] = float(s);
      }
    for (int64_t j = 0; j < m; ++j) {
      double sb = 0;
      for (int64_t i = 0; i < n; ++i) sb += dy[size_t(i * m + j)];
      db[size_t(j)] = float(sb);
      for (int64_t l = 0; l < k; ++l) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += double(dy[size_t(i * m + j)]) * x[size_t(i * k + l)];
        dw[size_t(j * k + l)] = float(s);
      }
    }
  }
};

constexpr double kTol = 2e-5;

struct ColumnResult {
  PerRank local, d_in, d_w, d_b;
};

ColumnResult run_column(const Problem& p, int tp) {
  ColumnResult res;
  for (PerRank* v : {&res.local, &res.d_in, &res.d_w, &res.d_b})
    v->resize(static_cast<size_t>(tp));
  run_ranks(tp, [&](Communicator& c) {
    const size_t r = size_t(c.rank());
    MatmulEngine eng;
    ColumnParallelLinear layer(p.k, p.m, true, c.size(), c.rank());
    layer.load(slice_of(tensor_of({p.m, p.k}, p.w)), slice_of(tensor_of({p.m}, p.b)));
    const Range mine = layer.part_range(0);
    EXPECT_EQ(mine, partition_even(p.m, c.size(), c.rank()));
    // (1, N, K): leading dims flatten.
    Tensor x = tensor_of({1, p.n, p.k}, p.x);
    Tensor y = nan_tensor({1, p.n, mine.size()});
    layer.forward(eng, y, x);
    res.local[r] = y.to_vector();
    Tensor dy_local = tensor_of({1, p.n, mine.size()}, columns(p.dy, p.n, p.m, mine));
    Tensor dx = nan_tensor({1, p.n, p.k});
    layer.backward(eng, dx, dy_local, x, c);
    res.d_in[r] = dx.to_vector();
    res.d_w[r] = layer.d_weight().to_vector();
    res.d_b[r] = layer.d_bias().to_vector();
    // A second backward writes the same d_in again and accumulates the weight gradient. oneDNN's
    // AVX2 GEMM may split the same product differently from one call to the next (seen: 2 ulps),
    // so within kTol of the magnitude: overwriting (1x) or accumulating twice (3x) is far outside.
    Tensor dx2 = nan_tensor({1, p.n, p.k});
    layer.backward(eng, dx2, dy_local, x, c);
    EXPECT_LE(testing::max_rel_diff(dx2.to_vector(), res.d_in[r], 0.1), kTol);
    std::vector<float> twice = res.d_w[r];
    for (float& v : twice) v *= 2;
    EXPECT_LE(testing::max_rel_diff(layer.d_weight().to_vector(), twice, 0.1), kTol);
  });
  return res;
}

TEST(ColumnParallelLinear, MatchesReferenceAndTp1) {
  TP_SEED_TRACE();
  // 11 outputs: uneven at tp 2, 3, 4; 3 outputs at tp 4: one rank owns no rows.
  for (const auto& [k, m] : {std::pair<int64_t, int64_t>{7, 11}, {5, 3}}) {
    const Problem p(5, k, m, uint64_t(k * 100 + m));
    const ColumnResult tp1 = run_column(p, 1);
    for (int tp = 1; tp <= 4; ++tp) {
      const ColumnResult res = tp == 1 ? tp1 : run_column(p, tp);
      for (int r = 0; r < tp; ++r) {
        SCOPED_TRACE(::testing::Message() << "K " << k << " M " << m << " tp " << tp << " rank " << r);
        const size_t ri = size_t(r);
        const Range mine = partition_even(m, tp, r);
        EXPECT_CLOSE(res.local[ri], columns(p.y, p.n, p.m, mine), kTol);
        EXPECT_CLOSE(res.d_in[ri], p.dx, kTol);
        EXPECT_CLOSE(res.d_in[ri], tp1.d_in[0], kTol);
        EXPECT_EQ(res.d_in[ri], res.d_in[0]);  // replicated gradient: bitwise identical
        EXPECT_CLOSE(res.d_w[ri], rows_of(p.dw, p.k, mine), kTol);
        EXPECT_CLOSE(res.d_b[ri], rows_of(p.db, 1, mine), kTol);
      }
    }
  }
}

// backward with a CommThread over the group: the input gradient's all-reduce runs on it while
// the weight gradient is computed. The same results as in line and as the reference (within
// kTol: oneDNN's AVX2 GEMM may split one product differently from call to call), at tp 2-4 (an
// empty shard at tp 4 with 3 outputs); a CommThread of another group is refused.
TEST(ColumnParallelLinear, OverlappedBackwardMatchesInLine) {
  TP_SEED_TRACE();
  for (const auto& [k, m] : {std::pair<int64_t, int64_t>{7, 11}, {5, 3}}) {
    const Problem p(5, k, m, uint64_t(k * 100 + m + 1));
    for (int tp = 2; tp <= 4; ++tp) {
      SCOPED_TRACE(::testing::Message() << "K " << k << " M " << m << " tp " << tp);
      run_ranks(tp, [&](Communicator& c) {
        MatmulEngine eng;
        CommThread async(c);
        ColumnParallelLinear in_line(p.k, p.m, true, c.size(), c.rank()), overlapped(p.k, p.m, true, c.size(), c.rank());
        for (ColumnParallelLinear* l : {&in_line, &overlapped})
          l->load(slice_of(tensor_of({p.m, p.k}, p.w)), slice_of(tensor_of({p.m}, p.b)));
        const Range mine = in_line.part_range(0);
        const Tensor x = tensor_of({p.n, p.k}, p.x);
        const Tensor dy = tensor_of({p.n, mine.size()}, columns(p.dy, p.n, p.m, mine));
        Tensor dx_a = nan_tensor({p.n, p.k}), dx_b = nan_tensor({p.n, p.k});
        in_line.backward(eng, dx_a, dy, x, c);
        overlapped.backward(eng, dx_b, dy, x, c, &async);
        EXPECT_CLOSE(dx_b.to_vector(), p.dx, kTol);
        EXPECT_LE(testing::max_rel_diff(dx_b.to_vector(), dx_a.to_vector(), 0.1), kTol);
        EXPECT_CLOSE(overlapped.d_weight().to_vector(), rows_of(p.dw, p.k, mine), kTol);
        EXPECT_LE(testing::max_rel_diff(overlapped.d_weight().to_vector(), in_line.d_weight().to_vector(), 0.1), kTol);
        EXPECT_EQ(overlapped.d_bias().to_vector(), in_line.d_bias().to_vector());
        // A CommThread over a one-rank group does not reduce over this one.
        auto solo = c.split(c.rank(), 0);
        CommThread other(*solo);
        try {
          overlapped.backward(eng, dx_b, dy, x, c, &other);
          ADD_FAILURE() << "a CommThread of another group was taken";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("CommThread"), std::string::npos) << e.what();
        }
      });
    }
  }
}

// Two weights fused into one column layer (the q/k/v and gate/up pattern): part A tiles its
// rows over the ranks, part B's rows are replicated on pairs of ranks (kv heads when tp >
// n_kv_heads). Output columns, input gradient and each part's weight gradient against the
// naive reference of each weight alone.
TEST(ColumnParallelLinear, FusedPartsMatchEachWeightAlone) {
  TP_SEED_TRACE();
  const Problem a(4, 6, 8, 71), b(4, 6, 2, 72);  // b's weights on a's input
  for (int tp : {1, 2, 4}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    std::vector<Range> ra = partition_even_all(8, tp), rb;
    for (int r = 0; r < tp; ++r) rb.push_back(tp == 1 ? Range{0, 2} : partition_even(2, 2, r * 2 / tp));
    run_ranks(tp, [&](Communicator& c) {
      MatmulEngine eng;
      ColumnParallelLinear layer(6, {ColumnPart{8, ra}, ColumnPart{2, rb}}, true, c.rank());
      const SliceLoader w[2] = {slice_of(tensor_of({8, 6}, a.w)), slice_of(tensor_of({2, 6}, b.w))};
      const SliceLoader bias[2] = {slice_of(tensor_of({8}, a.b)), slice_of(tensor_of({2}, b.b))};
      layer.load(w, bias);
      const Range ma = layer.part_range(0), mb = layer.part_range(1);
      EXPECT_EQ(layer.part_copies(1), tp == 1 ? 1 : tp / 2);
      ASSERT_EQ(layer.out_local(), ma.size() + mb.size());
      const Tensor x = tensor_of({4, 6}, a.x);
      Tensor y = nan_tensor({4, layer.out_local()});
      layer.forward(eng, y, x);
      // y = [x Wa^T + ba | x Wb^T + bb] restricted to this rank's rows of each.
      std::vector<double> want_b(size_t(4 * 2));
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 2; ++j) {
          double s = b.b[size_t(j)];
          for (int64_t l = 0; l < 6; ++l) s += double(a.x[size_t(i * 6 + l)]) * b.w[size_t(j * 6 + l)];
          want_b[size_t(i * 2 + j)] = s;
        }
      const std::vector<float> yb(want_b.begin(), want_b.end());
      const auto got = y.to_vector();
      for (int64_t i = 0; i < 4; ++i) {
        for (int64_t j = 0; j < ma.size(); ++j)
          EXPECT_NEAR(got[size_t(i * layer.out_local() + j)], a.y[size_t(i * 8 + ma.begin + j)], kTol);
        for (int64_t j = 0; j < mb.size(); ++j)
          EXPECT_NEAR(got[size_t(i * layer.out_local() + ma.size() + j)], yb[size_t(i * 2 + mb.begin + j)], kTol);
      }
      // Backward of d_y = [a.dy | 0]: d_in is a's alone and b's weight gradient is zero.
      Tensor dy = Tensor::zeros({4, layer.out_local()}, DType::kF32);
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < ma.size(); ++j)
          dy.data<float>()[i * layer.out_local() + j] = a.dy[size_t(i * 8 + ma.begin + j)];
      Tensor dx = nan_tensor({4, 6});
      layer.backward(eng, dx, dy, x, c);
      EXPECT_CLOSE(dx.to_vector(), a.dx, kTol);
      EXPECT_CLOSE(layer.part_d_weight(0).to_vector(), rows_of(a.dw, 6, ma), kTol);
      for (float v : layer.part_d_weight(1).to_vector()) EXPECT_EQ(v, 0.0f);
    });
  }
}

// Parts loaded in different dtypes stay separate segments, each multiplied into its own output
// columns: the result equals each part's own layer in its own dtype, side by side.
TEST(ColumnParallelLinear, MixedDtypePartsMatchEachPartAlone) {
  const Problem a(3, 8, 4, 81), b(3, 8, 6, 82);
  const Tensor wa = tensor_of({4, 8}, a.w), wb = tensor_of({6, 8}, b.w).to(DType::kBF16);
  run_ranks(2, [&](Communicator& c) {
    MatmulEngine eng;
    const std::vector<ColumnPart> parts{ColumnPart{4, partition_even_all(4, 2)}, ColumnPart{6, partition_even_all(6, 2)}};
    ColumnParallelLinear mixed(8, parts, false, c.rank());
    ColumnParallelLinear la(8, 4, false, 2, c.rank()), lb(8, 6, false, 2, c.rank());
    const SliceLoader m[2] = {slice_of(wa), slice_of(wb)};
    mixed.load(m);
    la.load(slice_of(wa));
    lb.load(slice_of(wb));
    EXPECT_THROW(mixed.weight(), Error);  // two segments: no single weight
    EXPECT_EQ(lb.weight().dtype(), DType::kBF16);
    const Tensor x = tensor_of({3, 8}, a.x);
    Tensor y = nan_tensor({3, mixed.out_local()}), ya = nan_tensor({3, la.out_local()}),
           yb = nan_tensor({3, lb.out_local()});
    mixed.forward(eng, y, x);
    la.forward(eng, ya, x);
    lb.forward(eng, yb, x);
    // A segment writes into a strided slice of y and its part alone into a dense tensor; the GEMM
    // library may pick a different kernel (summation order) for each, so the f32 sums agree to
    // rounding (~1e-6 relative here), not bit for bit. A segment multiplied in the wrong dtype or
    // into the wrong columns is off by ~1e-2 or more.
    EXPECT_CLOSE(y.slice(1, 0, la.out_local()).contiguous().to_vector(), ya.to_vector(), 1e-5);
    EXPECT_CLOSE(y.slice(1, la.out_local(), mixed.out_local()).contiguous().to_vector(), yb.to_vector(), 1e-5);
  });
}

struct RowResult {
  PerRank out, d_in, d_w, d_b;
};

RowResult run_row(const Problem& p, int tp) {
  RowResult res;
  for (PerRank* v : {&res.out, &res.d_in, &res.d_w, &res.d_b}) v->resize(static_cast<size_t>(tp));
  run_ranks(tp, [&](Communicator& c) {
    const size_t r = size_t(c.rank());
    MatmulEngine eng;
    RowParallelLinear layer(p.k, p.m, true, c.size(), c.rank());
    layer.load(slice_of(tensor_of({p.m, p.k}, p.w)), slice_of(tensor_of({p.m}, p.b)));
    const Range mine = layer.in_range();
    Tensor x = tensor_of({p.n, mine.size()}, columns(p.x, p.n, p.k, mine));
    Tensor y = nan_tensor({p.n, p.m});
    layer.forward(eng, y, x, c);
    res.out[r] = y.to_vector();
    Tensor dx = Tensor::zeros({p.n, mine.size()}, DType::kF32);
    layer.backward(eng, &dx, tensor_of({p.n, p.m}, p.dy), x);
    res.d_in[r] = dx.to_vector();
    res.d_w[r] = layer.d_weight().to_vector();
    res.d_b[r] = layer.d_bias().to_vector();
  });
  return res;
}

TEST(RowParallelLinear, MatchesReferenceAndTp1) {
  TP_SEED_TRACE();
  for (const auto& [k, m] : {std::pair<int64_t, int64_t>{11, 7}, {3, 5}}) {
    const Problem p(5, k, m, uint64_t(k * 100 + m + 7));
    const RowResult tp1 = run_row(p, 1);
    for (int tp = 1; tp <= 4; ++tp) {
      const RowResult res = tp == 1 ? tp1 : run_row(p, tp);
      for (int r = 0; r < tp; ++r) {
        SCOPED_TRACE(::testing::Message() << "K " << k << " M " << m << " tp " << tp << " rank " << r);
        const size_t ri = size_t(r);
        const Range mine = partition_even(k, tp, r);
        EXPECT_CLOSE(res.out[ri], p.y, kTol);
        EXPECT_CLOSE(res.out[ri], tp1.out[0], kTol);
        EXPECT_EQ(res.out[ri], res.out[0]);  // replicated output: bitwise identical
        EXPECT_CLOSE(res.d_in[ri], columns(p.dx, p.n, p.k, mine), kTol);
        EXPECT_CLOSE(res.d_w[ri], columns(p.dw, p.m, p.k, mine), kTol);
        EXPECT_CLOSE(res.d_b[ri], p.db, kTol);  // replicated, not summed over ranks
      }
    }
  }
}

// Column then row (the MLP/attention pattern without the nonlinearity): one all-reduce forward
// (g) and one backward (f) give y = (x W1^T + b1) W2^T + b2 at every TP size.
TEST(ParallelLinear, ColumnThenRowMatchesTheFullChain) {
  TP_SEED_TRACE();
  const int64_t n = 4, c_dim = 6, f_dim = 10;
  const Problem p1(n, c_dim, f_dim, 31);
  Rng rng(32);
  const auto w2 = rng.uniform_vec(size_t(c_dim * f_dim)), b2 = rng.uniform_vec(size_t(c_dim));
  const auto dy = rng.uniform_vec(size_t(n * c_dim));
  // Reference: h = p1.y (N, F); y = h W2^T + b2; d_h = dy W2; d_x = d_h W1.
  std::vector<double> y(size_t(n * c_dim)), dh(size_t(n * f_dim)), dx(size_t(n * c_dim));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c_dim; ++j) {
      double s = b2[size_t(j)];
      for (int64_t l = 0; l < f_dim; ++l) s += double(p1.y[size_t(i * f_dim + l)]) * w2[size_t(j * f_dim + l)];
      y[size_t(i * c_dim + j)] = s;
    }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t l = 0; l < f_dim; ++l) {
      double s = 0;
      for (int64_t j = 0; j < c_dim; ++j) s += double(dy[size_t(i * c_dim + j)]) * w2[size_t(j * f_dim + l)];
      dh[size_t(i * f_dim + l)] = s;
    }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c_dim; ++k) {
      double s = 0;
      for (int64_t l = 0; l < f_dim; ++l) s += dh[size_t(i * f_dim + l)] * p1.w[size_t(l * c_dim + k)];
      dx[size_t(i * c_dim + k)] = s;
    }
  const std::vector<float> y_ref(y.begin(), y.end()), dx_ref(dx.begin(), dx.end());
  for (int tp = 1; tp <= 4; ++tp) {
    PerRank outs(static_cast<size_t>(tp)), dxs(static_cast<size_t>(tp));
    run_ranks(tp, [&](Communicator& c) {
      MatmulEngine eng;
      ColumnParallelLinear up(c_dim, f_dim, true, c.size(), c.rank());
      RowParallelLinear down(f_dim, c_dim, true, c.size(), c.rank());
      up.load(slice_of(tensor_of({f_dim, c_dim}, p1.w)), slice_of(tensor_of({f_dim}, p1.b)));
      down.load(slice_of(tensor_of({c_dim, f_dim}, w2)), slice_of(tensor_of({c_dim}, b2)));
      EXPECT_EQ(up.part_range(0), down.in_range());
      Tensor x = tensor_of({n, c_dim}, p1.x);
      Tensor h = nan_tensor({n, up.out_local()});
      up.forward(eng, h, x);
      Tensor out = nan_tensor({n, c_dim});
      down.forward(eng, out, h, c);
      outs[size_t(c.rank())] = out.to_vector();
      Tensor d_h = Tensor::zeros({n, up.out_local()}, DType::kF32);
      down.backward(eng, &d_h, tensor_of({n, c_dim}, dy), h);
      Tensor d_x = nan_tensor({n, c_dim});
      up.backward(eng, d_x, d_h, x, c);
      dxs[size_t(c.rank())] = d_x.to_vector();
    });
    for (int r = 0; r < tp; ++r) {
      SCOPED_TRACE(::testing::Message() << "tp " << tp << " rank " << r);
      EXPECT_CLOSE(outs[size_t(r)], y_ref, kTol);
      EXPECT_CLOSE(dxs[size_t(r)], dx_ref, kTol);
    }
  }
}

TEST(ParallelLinear, InitIsTheSameModelAtEveryTpSize) {
  const int64_t k = 9, m = 13;
  PerRank col1(1), row1(1);
  for (int tp = 1; tp <= 4; ++tp) {
    PerRank col(static_cast<size_t>(tp)), row(static_cast<size_t>(tp));
    run_ranks(tp, [&](Communicator& c) {
      ColumnParallelLinear a(k, m, true, c.size(), c.rank());
      RowParallelLinear b(k, m, true, c.size(), c.rank());
      a.init_normal(0.02f, 1234, tensor_id_of("a"));
      b.init_normal(0.02f, 1234, tensor_id_of("b"));
      col[size_t(c.rank())] = a.weight().to_vector();
      row[size_t(c.rank())] = b.weight().to_vector();
      for (float v : a.bias().to_vector()) EXPECT_EQ(v, 0.0f);
    });
    if (tp == 1) {
      col1 = col;
      row1 = row;
    }
    for (int r = 0; r < tp; ++r) {
      EXPECT_EQ(col[size_t(r)], rows_of(col1[0], k, partition_even(m, tp, r)));
      EXPECT_EQ(row[size_t(r)], columns(row1[0], m, k, partition_even(k, tp, r)));
    }
  }
  EXPECT_NE(col1[0], row1[0]);  // distinct tensor ids draw distinct values
}

TEST(ParallelLinear, BadArgumentsThrow) {
  EXPECT_THROW(ColumnParallelLinear(4, 6, false, std::vector<Range>{{0, 2}, {3, 6}}, 0), Error);
  EXPECT_THROW(RowParallelLinear(4, 6, false, 2, 2), Error);
  ColumnParallelLinear col(4, 6, true, 2, 0);
  EXPECT_THROW(col.load(slice_of(Tensor::zeros({6, 5}, DType::kF32))), Error);  // wrong in dim
  EXPECT_THROW(col.load(slice_of(Tensor::zeros({6, 4}, DType::kF32))), Error);  // bias missing
  MatmulEngine eng;
  Tensor x = Tensor::zeros({2, 5}, DType::kF32), y = Tensor::zeros({2, 3}, DType::kF32);
  EXPECT_THROW(col.forward(eng, y, x), Error);
}

}  // namespace
}  // namespace tensorpar

namespace tensorpar {
namespace {

// Sequence parallel around a column -> row pair: all-gather the token rows before, reduce-scatter
// after (bias added after the reduce-scatter); backward the conjugates. Each rank ends with its
// rows of the full result at every TP size, with uneven token counts.
TEST(ParallelLinear, SequenceParallelColumnThenRow) {
  TP_SEED_TRACE();
  const int64_t n = 7, c_dim = 6, f_dim = 10;
  const Problem up_p(n, c_dim, f_dim, 41);  // x (N, C), W1 (F, C), b1; up_p.y = h (N, F)
  const Problem down_p(n, f_dim, c_dim, 42);  // W2 (C, F), b2, dy (N, C)
  // Reference through the chain: y = h W2^T + b2, d_h = dy W2, d_x = d_h W1.
  std::vector<float> y(size_t(n * c_dim)), dh(size_t(n * f_dim)), dx(size_t(n * c_dim));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c_dim; ++j) {
      double s = down_p.b[size_t(j)];
      for (int64_t l = 0; l < f_dim; ++l)
        s += double(up_p.y[size_t(i * f_dim + l)]) * down_p.w[size_t(j * f_dim + l)];
      y[size_t(i * c_dim + j)] = float(s);
    }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t l = 0; l < f_dim; ++l) {
      double s = 0;
      for (int64_t j = 0; j < c_dim; ++j)
        s += double(down_p.dy[size_t(i * c_dim + j)]) * down_p.w[size_t(j * f_dim + l)];
      dh[size_t(i * f_dim + l)] = float(s);
    }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c_dim; ++k) {
      double s = 0;
      for (int64_t l = 0; l < f_dim; ++l)
        s += double(dh[size_t(i * f_dim + l)]) * up_p.w[size_t(l * c_dim + k)];
      dx[size_t(i * c_dim + k)] = float(s);
    }
  for (int tp = 1; tp <= 4; ++tp) {
    PerRank ys(static_cast<size_t>(tp)), dxs(static_cast<size_t>(tp));
    run_ranks(tp, [&](Communicator& c) {
      MatmulEngine eng;
      const Range rows = partition_even(n, c.size(), c.rank());
      ColumnParallelLinear up(c_dim, f_dim, true, c.size(), c.rank());
      RowParallelLinear down(f_dim, c_dim, true, c.size(), c.rank());
      up.load(slice_of(tensor_of({f_dim, c_dim}, up_p.w)), slice_of(tensor_of({f_dim}, up_p.b)));
      down.load(slice_of(tensor_of({c_dim, f_dim}, down_p.w)),
                slice_of(tensor_of({c_dim}, down_p.b)));
      Tensor x_local = tensor_of({rows.size(), c_dim}, rows_of(up_p.x, c_dim, rows));
      Tensor x = nan_tensor({n, c_dim});
      gather_from_sequence_parallel_region_forward(x, x_local, c);
      Tensor h = nan_tensor({n, up.out_local()});
      up.forward(eng, h, x);
      Tensor partial = nan_tensor({n, c_dim});
      down.forward_partial(eng, partial, h);
      Tensor y_local = nan_tensor({rows.size(), c_dim});
      reduce_scatter_to_sequence_parallel_region_forward(y_local, partial, c);
      down.add_bias(y_local);
      ys[size_t(c.rank())] = y_local.to_vector();
      // Backward.
      Tensor dy_local = tensor_of({rows.size(), c_dim}, rows_of(down_p.dy, c_dim, rows));
      Tensor dy = nan_tensor({n, c_dim});
      reduce_scatter_to_sequence_parallel_region_backward(dy, dy_local, c);
      Tensor d_h = Tensor::zeros({n, up.out_local()}, DType::kF32);
      down.backward(eng, &d_h, dy, h);
      Tensor d_x = Tensor::zeros({n, c_dim}, DType::kF32);
      up.backward_partial(eng, &d_x, d_h, x);
      Tensor d_x_local = nan_tensor({rows.size(), c_dim});
      gather_from_sequence_parallel_region_backward(d_x_local, d_x, c);
      dxs[size_t(c.rank())] = d_x_local.to_vector();
    });
    for (int r = 0; r < tp; ++r) {
      SCOPED_TRACE(::testing::Message() << "tp " << tp << " rank " << r);
      const Range rows = partition_even(n, tp, r);
      EXPECT_CLOSE(ys[size_t(r)], rows_of(y, c_dim, rows), kTol);
      EXPECT_CLOSE(dxs[size_t(r)], rows_of(dx, c_dim, rows), kTol);
    }
  }
}

// Inference with GGUF weights: a fused column layer (parts of 12 and 5 rows: shards of 6 and 3
// rows, not whole groups of 8) and a row layer at tp 2, their weights row-packed for the int8
// kernel, give the GGUF layout's int8 results to f32 rounding (the two kernels sum in different
// orders); unpacking gives back the loaded weights (the row layer's loaded shard is a strided
// view, so its values are compared). Skips where the int8 kernel keeps the GGUF layout.
TEST(ParallelLinear, RowPackedWeightsForInference) {
  if (!int8_packed_rows_preferred(DType::kQ4_0) || !int8_packed_rows_preferred(DType::kQ5_1))
    GTEST_SKIP() << "this CPU's int8 kernel reads the GGUF layout";
  Rng rng(90);
  const int64_t K = 128;
  const Tensor wq = testing::random_blocks(rng, 12, K, DType::kQ4_0), wk = testing::random_blocks(rng, 5, K, DType::kQ4_0);
  const Tensor wo = testing::random_blocks(rng, 9, 2 * K, DType::kQ5_1);
  const Tensor x = tensor_of({3, K}, rng.uniform_vec(3 * K)), h = tensor_of({3, 2 * K}, rng.uniform_vec(6 * K));
  run_ranks(2, [&](Communicator& c) {
    MatmulEngine eng;
    eng.set_row_invariant(true);
    const std::vector<ColumnPart> parts{ColumnPart{12, partition_even_all(12, 2)}, ColumnPart{5, partition_even_all(5, 2)}};
    ColumnParallelLinear col(K, parts, false, c.rank());
    const SliceLoader m[2] = {slice_of(wq), slice_of(wk)};
    col.load(m);
    RowParallelLinear row(2 * K, 9, false, c.size(), c.rank());
    row.load(slice_of(wo));
    const std::vector<char> loaded_col = testing::bytes_of(col.weight());
    const std::vector<float> loaded_row = row.weight().to_vector();
    const Tensor hx = h.slice(1, row.in_range().begin, row.in_range().end).contiguous();
    Tensor yc = nan_tensor({3, col.out_local()}), yr = nan_tensor({3, 9});
    col.forward(eng, yc, x);
    row.forward_partial(eng, yr, hx);
    col.set_row_packed(true);
    row.set_row_packed(true);
    EXPECT_TRUE(dtype_is_row_packed(col.weight().dtype()));
    EXPECT_TRUE(dtype_is_row_packed(row.weight().dtype()));
    Tensor pc = nan_tensor({3, col.out_local()}), pr = nan_tensor({3, 9});
    col.forward(eng, pc, x);
    row.forward_partial(eng, pr, hx);
    EXPECT_CLOSE(pc.to_vector(), yc.to_vector(), 1e-4);
    EXPECT_CLOSE(pr.to_vector(), yr.to_vector(), 1e-4);
    col.set_row_packed(false);
    row.set_row_packed(false);
    EXPECT_EQ(testing::bytes_of(col.weight()), loaded_col);
    EXPECT_EQ(row.weight().to_vector(), loaded_row);
  });
}

}  // namespace
}  // namespace tensorpar
