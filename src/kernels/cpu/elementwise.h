// Elementwise passes over whole f32 arrays that a training step would otherwise run on one thread
// while the rest of its team waits: the residual adds of every layer and the gradient clipping
// scale. Parallel over the calling thread's team above a size, vectorized; each element gets one
// operation, so the results are the scalar loops' bit for bit at any thread count.
#pragma once

#include <cstdint>

namespace tensorpar {

// out[i] = a[i] + b[i] for i < n (out may alias a or b).
void add_arrays(float* out, const float* a, const float* b, int64_t n);

// x[i] *= s for i < n.
void scale_array(float* x, float s, int64_t n);

}  // namespace tensorpar
