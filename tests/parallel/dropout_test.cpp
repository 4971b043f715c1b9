#include "parallel/dropout.h"

#include <gtest/gtest.h>

#include "parallel_test_util.h"

namespace tensorpar {
namespace {

using testing::nan_tensor;
using testing::Rng;
using testing::rows_of;
using testing::tensor_of;

TEST(Dropout, MaskRateScaleAndBackward) {
  TP_SEED_TRACE();
  Rng rng(1);
  const int64_t n = 4096;
  const auto x = rng.uniform_vec(size_t(n), 0.5f, 1.5f);  // never zero: zeros mark drops
  const RngStream s = replicated_stream(7, 3);
  Tensor out = nan_tensor({n});
  dropout_forward(out, tensor_of({n}, x), 0.25f, s, 100);
  const auto y = out.to_vector();
  int dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = s.uniform(uint64_t(100 + i)) >= 0.25f;
    dropped += !keep;
    EXPECT_EQ(y[size_t(i)], keep ? x[size_t(i)] * (1.0f / 0.75f) : 0.0f);
  }
  EXPECT_NEAR(double(dropped) / n, 0.25, 0.03);
  // Backward: the same mask, accumulated.
  const auto dy = rng.uniform_vec(size_t(n));
  Tensor dx = tensor_of({n}, std::vector<float>(size_t(n), 1.0f));
  dropout_backward(dx, tensor_of({n}, dy), 0.25f, s, 100);
  const auto g = dx.to_vector();
  for (int64_t i = 0; i < n; ++i)
    EXPECT_FLOAT_EQ(g[size_t(i)], 1.0f + (y[size_t(i)] != 0.0f ? dy[size_t(i)] * (1.0f / 0.75f) : 0.0f));
  // p = 0 is the identity.
  Tensor same = nan_tensor({n});
  dropout_forward(same, tensor_of({n}, x), 0.0f, s, 0);
  EXPECT_EQ(same.to_vector(), x);
  EXPECT_THROW(dropout_forward(same, tensor_of({n}, x), 1.0f, s, 0), Error);
  EXPECT_THROW(dropout_forward(same, tensor_of({n / 2}, rows_of(x, 1, Range{0, n / 2})), 0.1f, s, 0),
               Error);
}

TEST(Dropout, ShardWithGlobalOffsetMatchesTheFullTensor) {
  // Sequence-parallel rows: a shard passing its first global element gets the full mask's rows.
  Rng rng(2);
  const int64_t rows = 7, cols = 5;
  const auto x = rng.uniform_vec(size_t(rows * cols), 0.5f, 1.5f);
  const RngStream s = replicated_stream(11);
  Tensor full = nan_tensor({rows, cols});
  dropout_forward(full, tensor_of({rows, cols}, x), 0.5f, s, 1000);
  for (int parts = 1; parts <= 4; ++parts)
    for (int r = 0; r < parts; ++r) {
      const Range mine = partition_even(rows, parts, r);
      Tensor local = nan_tensor({mine.size(), cols});
      dropout_forward(local, tensor_of({mine.size(), cols}, rows_of(x, cols, mine)), 0.5f, s,
                      1000 + uint64_t(mine.begin * cols));
      EXPECT_EQ(local.to_vector(), rows_of(full.to_vector(), cols, mine));
    }
  // tp-local streams give each rank its own mask.
  Tensor a = nan_tensor({rows, cols}), b = nan_tensor({rows, cols});
  dropout_forward(a, tensor_of({rows, cols}, x), 0.5f, tp_local_stream(11, 0), 0);
  dropout_forward(b, tensor_of({rows, cols}, x), 0.5f, tp_local_stream(11, 1), 0);
  EXPECT_NE(a.to_vector(), b.to_vector());
}

}  // namespace
}  // namespace tensorpar
