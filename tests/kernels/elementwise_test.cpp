// add_arrays and scale_array against the scalar loops, bitwise, with the team and with one
// thread, at sizes below and above the parallel threshold (and odd tails); in place too.
#include "kernels/cpu/elementwise.h"

#include <omp.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace tensorpar {
namespace {

const int64_t kSizes[] = {0, 1, 15, 17, 32768, 32769, 100003, 1 << 20};

std::vector<float> random_values(testing::Rng& rng, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = (rng.uniform() - 0.5f) * 7.0f;
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // (memcmp on an empty vector's data(), a null pointer, is undefined.)
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(Elementwise, AddIsTheScalarSumWithAnyThreadCount) {
  testing::Rng rng(21);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  const int saved = omp_get_max_threads();
  for (const int64_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<float> a = random_values(rng, n), b = random_values(rng, n);
    std::vector<float> want(a.size());
    for (size_t i = 0; i < a.size(); ++i) want[i] = a[i] + b[i];
    for (const int threads : {saved, 1}) {
      omp_set_num_threads(threads);
      std::vector<float> out(a.size(), -1.0f);
      add_arrays(out.data(), a.data(), b.data(), n);
      EXPECT_TRUE(same_bits(out, want)) << threads << " threads";
      std::vector<float> in_place = a;  // out aliasing a, as the residual adds call it
      add_arrays(in_place.data(), in_place.data(), b.data(), n);
      EXPECT_TRUE(same_bits(in_place, want)) << threads << " threads, in place";
    }
    omp_set_num_threads(saved);
  }
}

TEST(Elementwise, ScaleIsTheScalarProductWithAnyThreadCount) {
  testing::Rng rng(22);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  const int saved = omp_get_max_threads();
  for (const int64_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<float> x = random_values(rng, n);
    const float s = 0.37f;
    std::vector<float> want = x;
    for (float& v : want) v *= s;
    for (const int threads : {saved, 1}) {
      omp_set_num_threads(threads);
      std::vector<float> got = x;
      scale_array(got.data(), s, n);
      EXPECT_TRUE(same_bits(got, want)) << threads << " threads";
    }
    omp_set_num_threads(saved);
  }
}

TEST(Elementwise, RejectsANegativeSize) {
  float x = 1.0f;
  EXPECT_THROW(add_arrays(&x, &x, &x, -1), Error);
  EXPECT_THROW(scale_array(&x, 2.0f, -1), Error);
}

}  // namespace
}  // namespace tensorpar
