// Every mapping called directly, forward and backward, at tp 1..4 with uneven shards.
#include "parallel/mappings.h"

#include <gtest/gtest.h>

#include <mutex>

#include "parallel_test_util.h"

namespace tensorpar {
namespace {

using testing::columns;
using testing::max_abs_diff;
using testing::nan_tensor;
using testing::Rng;
using testing::rows_of;
using testing::run_ranks;
using testing::tensor_of;

// Per-rank random inputs of n elements, made on the main thread.
std::vector<std::vector<float>> per_rank_inputs(int tp, size_t n, uint64_t salt) {
  Rng rng(salt);
  std::vector<std::vector<float>> v;
  for (int r = 0; r < tp; ++r) v.push_back(rng.uniform_vec(n));
  return v;
}

std::vector<float> sum_of(const std::vector<std::vector<float>>& v) {
  std::vector<double> s(v[0].size(), 0.0);
  for (const auto& x : v)
    for (size_t i = 0; i < x.size(); ++i) s[i] += x[i];
  return std::vector<float>(s.begin(), s.end());
}

TEST(Mappings, CopyAndReduceRegions) {
  TP_SEED_TRACE();
  for (int tp = 1; tp <= 4; ++tp) {
    const Shape shape = {3, 7};
    const auto in = per_rank_inputs(tp, 21, uint64_t(tp));
    std::vector<std::vector<float>> f_fwd(static_cast<size_t>(tp)), f_bwd(static_cast<size_t>(tp)), g_fwd(static_cast<size_t>(tp)),
        g_bwd(static_cast<size_t>(tp));
    run_ranks(tp, [&](Communicator& c) {
      const size_t r = size_t(c.rank());
      Tensor x = tensor_of(shape, in[r]);
      copy_to_tp_region_forward(x, c);  // identity
      f_fwd[r] = x.to_vector();
      copy_to_tp_region_backward(x, c);  // all-reduce
      f_bwd[r] = x.to_vector();
      Tensor y = tensor_of(shape, in[r]);
      reduce_from_tp_region_forward(y, c);  // all-reduce
      g_fwd[r] = y.to_vector();
      Tensor dy = tensor_of(shape, in[r]);
      reduce_from_tp_region_backward(dy, c);  // identity
      g_bwd[r] = dy.to_vector();
    });
    const auto total = sum_of(in);
    for (int r = 0; r < tp; ++r) {
      SCOPED_TRACE(::testing::Message() << "tp " << tp << " rank " << r);
      EXPECT_EQ(f_fwd[size_t(r)], in[size_t(r)]);
      EXPECT_LE(max_abs_diff(f_bwd[size_t(r)], total), 1e-6);
      EXPECT_LE(max_abs_diff(g_fwd[size_t(r)], total), 1e-6);
      EXPECT_EQ(g_bwd[size_t(r)], in[size_t(r)]);
      // Every rank ends bitwise identical.
      EXPECT_EQ(f_bwd[size_t(r)], f_bwd[0]);
    }
  }
}

TEST(Mappings, SequenceParallel) {
  TP_SEED_TRACE();
  const int64_t per_row = 2 * 3;  // tensors (N, 2, 3)
  for (int64_t n_tokens : {7, 8}) {
    for (int tp = 1; tp <= 4; ++tp) {
      SCOPED_TRACE(::testing::Message() << "N " << n_tokens << " tp " << tp);
      Rng rng(uint64_t(20 + tp));
      const auto full = rng.uniform_vec(size_t(n_tokens * per_row));
      const auto partial = per_rank_inputs(tp, size_t(n_tokens * per_row), uint64_t(40 + tp));
      std::vector<std::vector<float>> scat(static_cast<size_t>(tp)), scat_bwd(static_cast<size_t>(tp)), gath(static_cast<size_t>(tp)),
          gath_bwd(static_cast<size_t>(tp)), rs(static_cast<size_t>(tp)), rs_bwd(static_cast<size_t>(tp));
      run_ranks(tp, [&](Communicator& c) {
        const size_t r = size_t(c.rank());
        const int64_t n_local = partition_even(n_tokens, c.size(), c.rank()).size();
        Tensor in = tensor_of({n_tokens, 2, 3}, full);
        Tensor local = nan_tensor({n_local, 2, 3});
        scatter_to_sequence_parallel_region_forward(local, in, c);
        scat[r] = local.to_vector();
        Tensor all = nan_tensor({n_tokens, 2, 3});
        scatter_to_sequence_parallel_region_backward(all, local, c);  // all-gather
        scat_bwd[r] = all.to_vector();
        Tensor g = nan_tensor({n_tokens, 2, 3});
        gather_from_sequence_parallel_region_forward(g, local, c);  // all-gather
        gath[r] = g.to_vector();
        Tensor p = tensor_of({n_tokens, 2, 3}, partial[r]);
        Tensor d_local = nan_tensor({n_local, 2, 3});
        gather_from_sequence_parallel_region_backward(d_local, p, c);  // reduce-scatter
        gath_bwd[r] = d_local.to_vector();
        Tensor rs_out = nan_tensor({n_local, 2, 3});
        reduce_scatter_to_sequence_parallel_region_forward(rs_out, p, c);
        rs[r] = rs_out.to_vector();
        Tensor rs_back = nan_tensor({n_tokens, 2, 3});
        reduce_scatter_to_sequence_parallel_region_backward(rs_back, local, c);  // all-gather
        rs_bwd[r] = rs_back.to_vector();
      });
      const auto total = sum_of(partial);
      for (int r = 0; r < tp; ++r) {
        SCOPED_TRACE(::testing::Message() << "rank " << r);
        const Range mine = partition_even(n_tokens, tp, r);
        EXPECT_EQ(scat[size_t(r)], rows_of(full, per_row, mine));
        EXPECT_EQ(scat_bwd[size_t(r)], full);
        EXPECT_EQ(gath[size_t(r)], full);
        EXPECT_EQ(rs_bwd[size_t(r)], full);
        EXPECT_LE(max_abs_diff(gath_bwd[size_t(r)], rows_of(total, per_row, mine)), 1e-6);
        EXPECT_EQ(rs[size_t(r)], gath_bwd[size_t(r)]);
      }
    }
  }
}

TEST(Mappings, BadShapesThrow) {
  std::mutex mu;
  int thrown = 0;
  run_ranks(2, [&](Communicator& c) {
    auto count = [&](auto&& fn) {
      try {
        fn();
      } catch (const Error&) {
        std::lock_guard<std::mutex> lock(mu);
        ++thrown;
      }
    };
    Tensor in = Tensor::zeros({7, 3}, DType::kF32);
    Tensor wrong = Tensor::zeros({3, 3}, DType::kF32);       // rank 0 holds 4 of the 7 rows
    Tensor other_cols = Tensor::zeros({4, 2}, DType::kF32);  // trailing dims differ
    Tensor bf = Tensor::zeros({7, 3}, DType::kBF16);
    if (c.rank() == 0) {
      count([&] { scatter_to_sequence_parallel_region_forward(wrong, in, c); });
      count([&] { scatter_to_sequence_parallel_region_forward(other_cols, in, c); });
    }
    count([&] { reduce_from_tp_region_forward(bf, c); });  // both ranks throw: nobody waits
  });
  EXPECT_EQ(thrown, 2 + 2);
}

}  // namespace
}  // namespace tensorpar
