// The sum of squares of a float array in double, for gradient norms (clipping): vectorized and
// parallel, in a fixed order that depends only on n, so the same bits with any thread count.
#pragma once

#include <cstdint>

namespace tensorpar {

// sum over i of double(x[i])^2. Blocks of 2^16 elements, each summed in 8 double lanes (element i
// into lane i mod 8, the lanes then added pairwise), the block sums added in block order.
double sum_of_squares(const float* x, int64_t n);

}  // namespace tensorpar
