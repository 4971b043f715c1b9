// The naive sampler over one full row (the oracle of batch_sampler.cpp). Filters follow the
// order of Hugging Face's generate(): temperature, top-k, top-p (over the top-k renormalised
// mass), min-p (relative to the top probability). Each keeps
// {i : z_i >= tau}, so the kept set is the intersection, i.e. z_i >= max of the thresholds.
// Masses are summed in double in vocab order.
#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "infer/float_order.h"

namespace tensorpar {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The row's scaled logits and the threshold logic over them.
struct Shard {
  std::vector<float> z;   // scaled logits
  std::vector<double> e;  // exp(z - global max), computed once
  void set_max(float m) {
    e.resize(z.size());
    for (size_t i = 0; i < z.size(); ++i) e[i] = std::exp(double(z[i]) - double(m));
  }
  double mass_at_least(float tau) const {
    double s = 0;
    for (size_t i = 0; i < z.size(); ++i)
      if (z[i] >= tau) s += e[i];
    return s;
  }
};

// Largest threshold tau in [lo, hi] (as float keys) with mass(z >= tau) >= target; `mass` is
// the global mass function. mass(lo) >= target must hold.
template <typename MassFn>
float bisect_threshold(float lo, float hi, double target, MassFn&& mass) {
  int64_t a = float_key(lo), b = float_key(hi);
  if (mass(hi) >= target) return hi;
  while (b - a > 1) {  // invariant: mass(a) >= target > mass(b)
    const int64_t mid = a + (b - a) / 2;
    if (mass(key_float(mid)) >= target)
      a = mid;
    else
      b = mid;
  }
  return key_float(a);
}

// k-th largest of the values (k >= 1); -inf if fewer.
float kth_largest(std::vector<float> v, int k) {
  if (int(v.size()) < k) return kNegInf;
  std::nth_element(v.begin(), v.begin() + (k - 1), v.end(), std::greater<float>());
  return v[size_t(k - 1)];
}

}  // namespace

int32_t sample_full_naive(const float* logits, int64_t V, const SamplingParams& p, double u) {
  TP_CHECK(V > 0, "[sample] empty logits row");
  if (p.temperature <= 0) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (logits[i] > logits[best]) best = i;
    return int32_t(best);
  }
  Shard s;
  s.z.resize(static_cast<size_t>(V));
  float m = kNegInf;
  for (int64_t i = 0; i < V; ++i) m = std::max(m, s.z[size_t(i)] = logits[i] / p.temperature);
  s.set_max(m);
  auto mass = [&](float tau) { return s.mass_at_least(tau); };
  float tau = kNegInf;
  if (p.top_k > 0) tau = kth_largest(s.z, p.top_k);
  if (p.top_p < 1.0f) tau = std::max(tau, bisect_threshold(tau, m, double(p.top_p) * mass(tau), mass));
  if (p.min_p > 0.0f) tau = std::max(tau, m + std::log(p.min_p));
  const double target = u * mass(tau);
  double acc = 0;
  int64_t last = -1;
  for (int64_t i = 0; i < V; ++i) {
    if (s.z[size_t(i)] < tau) continue;
    acc += s.e[size_t(i)];
    last = i;
    if (acc > target) return int32_t(i);
  }
  return int32_t(last);
}

void validate(const SamplingParams& p) {
  TP_CHECK(p.temperature >= 0 && std::isfinite(p.temperature), "[sampling] temperature ",
           p.temperature, " must be >= 0");
  TP_CHECK(p.top_k >= 0, "[sampling] top_k ", p.top_k, " must be >= 0");
  TP_CHECK(p.top_p > 0 && p.top_p <= 1, "[sampling] top_p ", p.top_p, " must be in (0, 1]");
  TP_CHECK(p.min_p >= 0 && p.min_p < 1, "[sampling] min_p ", p.min_p, " must be in [0, 1)");
  TP_CHECK(p.repetition_penalty > 0 && p.repetition_penalty <= 10, "[sampling] repetition penalty ",
           p.repetition_penalty, " must be in (0, 10] (1 = off)");
  TP_CHECK(std::isfinite(p.frequency_penalty) && std::isfinite(p.presence_penalty),
           "[sampling] frequency and presence penalties must be finite");
}

}  // namespace tensorpar
