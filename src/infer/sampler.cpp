// Sharded sampling. Filters follow the order of Hugging Face's generate(): temperature, top-k,
// top-p (over the top-k renormalised mass), min-p (relative to the top probability). Each keeps
// {i : z_i >= tau}, so the kept set is the intersection, i.e. z_i >= max of the thresholds.
// Masses are summed in double and exchanged as raw bits through i64 all-gathers, summed in rank
// order, so every rank takes identical decisions.
#include "infer/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "infer/float_order.h"

namespace tensorpar {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// All ranks' doubles in rank order.
std::vector<double> gather_doubles(double x, Communicator& tp) {
  std::vector<int64_t> out(size_t(tp.size()));
  const int64_t bits = std::bit_cast<int64_t>(x);
  tp.all_gather(&bits, out.data(), 1, DType::kI64);
  std::vector<double> d(out.size());
  for (size_t i = 0; i < out.size(); ++i) d[i] = std::bit_cast<double>(out[i]);
  return d;
}

double sum_doubles(double x, Communicator& tp) {
  double s = 0;
  for (double v : gather_doubles(x, tp)) s += v;
  return s;
}

// One row's view of the shard: scaled logits and the threshold logic over them. Works the same
// for the whole row (naive oracle, tp of one rank) and a shard.
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

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  TP_CHECK(params.temperature >= 0 && std::isfinite(params.temperature), "[Sampler] temperature ",
           params.temperature, " must be >= 0");
  TP_CHECK(params.top_k >= 0, "[Sampler] top_k ", params.top_k, " must be >= 0");
  TP_CHECK(params.top_p > 0 && params.top_p <= 1, "[Sampler] top_p ", params.top_p, " must be in (0, 1]");
  TP_CHECK(params.min_p >= 0 && params.min_p < 1, "[Sampler] min_p ", params.min_p, " must be in [0, 1)");
}

double Sampler::next_uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(const float* logits_local, Range vocab, Communicator& tp) {
  const int64_t n = vocab.size();
  if (params_.temperature <= 0) {
    // Local argmax, then the best (value, lowest index) over ranks.
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i)
      if (best < 0 || logits_local[i] > logits_local[best]) best = i;
    const int64_t mine[2] = {best < 0 ? std::numeric_limits<int64_t>::min() : float_key(logits_local[best]),
                             best < 0 ? -1 : vocab.begin + best};
    std::vector<int64_t> all(size_t(2 * tp.size()));
    tp.all_gather(mine, all.data(), 2, DType::kI64);
    int64_t key = std::numeric_limits<int64_t>::min(), id = -1;
    for (int r = 0; r < tp.size(); ++r) {
      const int64_t k = all[size_t(2 * r)], i = all[size_t(2 * r + 1)];
      if (i >= 0 && (id < 0 || k > key || (k == key && i < id))) key = k, id = i;
    }
    TP_CHECK(id >= 0, "[Sampler] no logits on any rank");
    return int32_t(id);
  }
  const double u = next_uniform();  // drawn on every rank: the streams stay in step
  Shard s;
  s.z.resize(static_cast<size_t>(n));
  float m_local = kNegInf;
  for (int64_t i = 0; i < n; ++i) m_local = std::max(m_local, s.z[size_t(i)] = logits_local[i] / params_.temperature);
  float m = m_local;
  tp.all_reduce(&m, &m, 1, DType::kF32, ReduceOp::kMax);
  s.set_max(m);
  auto mass = [&](float tau) { return sum_doubles(s.mass_at_least(tau), tp); };

  float tau = kNegInf;
  if (params_.top_k > 0) {
    // The global top-k lies within the union of every rank's local top-k.
    const int k = params_.top_k;
    std::vector<float> local(s.z);
    std::vector<float> top(size_t(k), kNegInf);
    if (!local.empty()) {
      const size_t kk = std::min(local.size(), size_t(k));
      std::partial_sort(local.begin(), local.begin() + kk, local.end(), std::greater<float>());
      std::copy(local.begin(), local.begin() + kk, top.begin());
    }
    std::vector<float> all(size_t(k) * size_t(tp.size()));
    tp.all_gather(top.data(), all.data(), k, DType::kF32);
    tau = kth_largest(all, k);
  }
  if (params_.top_p < 1.0f) tau = std::max(tau, bisect_threshold(tau, m, double(params_.top_p) * mass(tau), mass));
  if (params_.min_p > 0.0f) tau = std::max(tau, m + std::log(params_.min_p));

  // Draw: find the rank whose kept mass holds u * total, then walk its shard in vocab order.
  const std::vector<double> masses = gather_doubles(s.mass_at_least(tau), tp);
  double total = 0;
  for (double x : masses) total += x;
  const double target = u * total;
  double before = 0;
  int owner = -1;
  for (int r = 0; r < tp.size(); ++r) {
    if (masses[size_t(r)] > 0) owner = r;  // last rank with mass: fallback for rounding at the end
    if (masses[size_t(r)] > 0 && before + masses[size_t(r)] > target) {
      owner = r;
      break;
    }
    before += masses[size_t(r)];
  }
  TP_CHECK(owner >= 0, "[Sampler] nothing left to sample after filtering");
  int64_t id = -1;
  if (tp.rank() == owner) {
    double acc = before;
    for (int64_t i = 0; i < n; ++i) {
      if (s.z[size_t(i)] < tau) continue;
      acc += s.e[size_t(i)];
      id = vocab.begin + i;
      if (acc > target) break;
    }
  }
  tp.all_reduce(&id, &id, 1, DType::kI64, ReduceOp::kMax);
  return int32_t(id);
}

}  // namespace tensorpar
