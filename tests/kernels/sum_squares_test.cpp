// sum_of_squares against a naive long-double sum (relative 1e-13: double lanes over at most 2^16
// elements each), and its fixed order: the same bits with one thread as with the team, at sizes
// below, at and above one block, with tails past the 8 lanes.
#include "kernels/cpu/sum_squares.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "test_util.h"

namespace tensorpar {
namespace {

TEST(SumOfSquares, MatchesTheNaiveSumWithAnyThreadCount) {
  testing::Rng rng(11);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (const int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(65536),
                          int64_t(65536 * 3 + 5), int64_t(1000003)}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = rng.uniform() * 3.0f;
    long double want = 0;
    for (const float v : x) want += (long double)v * (long double)v;
    const double got = sum_of_squares(x.data(), n);
    EXPECT_LE(std::fabs(got - double(want)), 1e-13 * double(want) + 1e-300);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const double single = sum_of_squares(x.data(), n);
    omp_set_num_threads(saved);
    EXPECT_EQ(std::memcmp(&single, &got, sizeof(double)), 0);
  }
}

}  // namespace
}  // namespace tensorpar
