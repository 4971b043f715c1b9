#include "kernels/cpu/sum_squares.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/fast_math.h"

namespace tensorpar {

namespace {

constexpr int64_t kBlock = int64_t(1) << 16;
constexpr int kLanes = 8;

TP_VECTOR_CLONES double block_sum(const float* x, int64_t n) {
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += double(x[i + l]) * double(x[i + l]);
  for (int l = 0; i + l < n; ++l) acc[l] += double(x[i + l]) * double(x[i + l]);
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

}  // namespace

double sum_of_squares(const float* x, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  if (blocks <= 1) return n > 0 ? block_sum(x, n) : 0.0;
  std::vector<double> part(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b)
    part[size_t(b)] = block_sum(x + b * kBlock, std::min(kBlock, n - b * kBlock));
  double s = 0;
  for (const double p : part) s += p;
  return s;
}

}  // namespace tensorpar
