// One AdamW step over a flat f32 parameter array (Loshchilov & Hutter; PyTorch's AdamW):
// decoupled weight decay, bias-corrected moments.
#pragma once

#include <cstdint>

namespace tensorpar {

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// For each i: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay * p).
// params, m, v (n) updated in place; grads (n); step t >= 1 (the count including this step).
void adamw_step(float* params, float* m, float* v, const float* grads, int64_t n, int64_t t,
                const AdamWConfig& cfg);

}  // namespace tensorpar
