// Batched sharded sampling in phases; each phase is one collective carrying every row's piece:
//   1. row statistics (all_gather): logprob pieces of the raw logits (local max, sum-exp, top-n),
//      then, after the penalties, the greedy candidate (key, id, raw logit) or the sampled row's
//      local max and local top-k of the scaled logits;
//   2. top-p bisection rounds (all_gather), only while some row still bisects;
//   3. kept masses per rank (all_gather) and the owner's walk;
//   4. the drawn ids with their raw logits (all_reduce max).
// Arithmetic follows sampler.cpp step for step (double masses summed in vocab order, then in
// rank order, exchanged as raw bits), so every rank decides alike and each row gets what
// sample_full_naive gives on its full penalised row.
#include "infer/batch_sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "infer/float_order.h"

namespace tensorpar {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kNoKey = std::numeric_limits<int64_t>::min();

int64_t float_word(float f) {
  return int64_t(std::bit_cast<uint32_t>(f));
}
float word_float(int64_t w) {
  return std::bit_cast<float>(uint32_t(w));
}
int64_t double_word(double d) {
  return std::bit_cast<int64_t>(d);
}
double word_double(int64_t w) {
  return std::bit_cast<double>(w);
}

bool is_greedy(const RowSampling& r) {
  return r.params.temperature <= 0;
}

// Words (i64) a row puts into the phase-1 gather; depends on the params only, so every rank
// lays the payload out alike.
int64_t stats_words(const RowSampling& r) {
  int64_t w = 0;
  if (r.top_logprobs >= 0) w += 2 + 2 * int64_t(r.top_logprobs);  // max, sum-exp, (logit, id)*n
  w += is_greedy(r) ? 3 : 1 + int64_t(r.params.top_k);            // (key, id, raw) | max, top-k
  return w;
}

void check_row(const RowSampling& r, size_t i) {
  validate(r.params);
  TP_CHECK(is_greedy(r) || (r.u >= 0 && r.u < 1), "[sample_batch] row ", i, " u: got ", r.u,
           ", expected in [0, 1)");
  TP_CHECK(r.top_logprobs >= -1, "[sample_batch] row ", i, " top_logprobs: got ", r.top_logprobs,
           ", expected >= -1");
  std::vector<int32_t> ids;
  ids.reserve(r.counts.size());
  for (const auto& [id, c] : r.counts) {
    TP_CHECK(id >= 0 && c >= 0, "[sample_batch] row ", i, " penalty count: got (", id, ", ", c,
             "), expected a token id >= 0 and a count >= 0");
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  const auto dup = std::adjacent_find(ids.begin(), ids.end());
  TP_CHECK(dup == ids.end(), "[sample_batch] row ", i, " penalty counts: got token ",
           dup == ids.end() ? -1 : *dup, " twice, expected each token at most once");
}

// The raw logit (before penalties) at local index i: x holds penalised logits, `saved` the raw
// values of the penalised positions, sorted by index.
float raw_at(const float* x, const std::vector<std::pair<int64_t, float>>& saved, int64_t i) {
  const auto it =
      std::lower_bound(saved.begin(), saved.end(), std::pair<int64_t, float>(i, kNegInf),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
  return it != saved.end() && it->first == i ? it->second : x[i];
}

// k-th largest of the values (k >= 1); -inf if fewer (as sampler.cpp).
float kth_largest(std::vector<float> v, int k) {
  if (int64_t(v.size()) < k) return kNegInf;
  std::nth_element(v.begin(), v.begin() + (k - 1), v.end(), std::greater<float>());
  return v[size_t(k - 1)];
}

// A sampled row's kept candidates on this rank: the positions whose scaled logit z is at least
// the lowest threshold the row can still take, in vocab order, with e = exp(z - global max).
// Summing e over z >= tau in this order is sampler.cpp's mass_at_least, bit for bit.
struct Candidates {
  std::vector<int32_t> index;  // local
  std::vector<float> z;
  std::vector<double> e;
  double mass_at_least(float tau) const {
    // Adding +0.0 for a position below tau leaves the sum as skipping it does (the sum starts
    // at +0 and every e >= 0), without a branch per position.
    double s = 0;
    for (size_t i = 0; i < z.size(); ++i) s += z[i] >= tau ? e[i] : 0.0;
    return s;
  }
  // Drops the positions below lo once no later threshold can be lower: they would add nothing
  // to any later sum, so every sum stays bit for bit the same, only cheaper.
  void drop_below(float lo) {
    size_t w = 0;
    for (size_t i = 0; i < z.size(); ++i)
      if (z[i] >= lo) index[w] = index[i], z[w] = z[i], e[w] = e[i], ++w;
    index.resize(w), z.resize(w), e.resize(w);
  }
};

// One row's state across the phases (identical on every rank except the local parts).
struct RowState {
  int64_t offset = 0;                            // into the phase-1 payload (words)
  std::vector<std::pair<int64_t, float>> saved;  // raw logits at penalised positions (logprobs)
  Candidates cand;                               // sampled: after phase 1
  double lse = 0;                                // logprobs: log-sum-exp of the raw row
  float m = kNegInf, tau = kNegInf;              // sampled: global max of z, kept threshold
  int64_t a = 0, b = 0;                          // top-p bisection bracket (float keys)
  double target = 0;                             // top-p mass target
};

// Sums each row's gathered doubles over ranks in rank order. `all` is the all_gather output of
// `per_rank` words per rank; the result holds per_rank sums.
std::vector<double> sum_over_ranks(const std::vector<int64_t>& all, size_t per_rank, int n_ranks) {
  std::vector<double> s(per_rank, 0.0);
  for (int r = 0; r < n_ranks; ++r)
    for (size_t j = 0; j < per_rank; ++j) s[j] += word_double(all[size_t(r) * per_rank + j]);
  return s;
}

// Local indices of the n_top largest of x[0, n) (ties: lower index first), most likely first:
// one pass keeping a sorted list, O(n) for the few alternatives logprobs ask for.
std::vector<int64_t> local_top(const float* x, int64_t n, int n_top) {
  std::vector<int64_t> top;
  if (n_top <= 0) return top;
  top.reserve(size_t(n_top) + 1);
  for (int64_t i = 0; i < n; ++i) {
    // Scanning ids upwards, an equal value never displaces an earlier one.
    if (int64_t(top.size()) == n_top && !(x[i] > x[top.back()])) continue;
    auto pos = std::upper_bound(top.begin(), top.end(), i,
                                [&](int64_t a, int64_t b) { return x[a] > x[b]; });
    top.insert(pos, i);
    if (int64_t(top.size()) > n_top) top.pop_back();
  }
  return top;
}

// Phase 1, the local part of one row: appends its words to `out` and applies the penalties.
void local_row_stats(RowState& st, float* x, Range vocab, const RowSampling& row,
                     std::vector<int64_t>& out, std::vector<float>& scratch) {
  const int64_t n = vocab.size();
  if (row.top_logprobs >= 0) {
    float mx = kNegInf;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
    double s = 0;
    if (mx > kNegInf)
      for (int64_t i = 0; i < n; ++i) s += std::exp(double(x[i]) - double(mx));
    out.push_back(float_word(mx));
    out.push_back(double_word(s));
    const std::vector<int64_t> top = local_top(x, n, row.top_logprobs);
    for (size_t j = 0; j < size_t(row.top_logprobs); ++j) {
      out.push_back(float_word(j < top.size() ? x[top[j]] : kNegInf));
      out.push_back(j < top.size() ? vocab.begin + top[j] : -1);
    }
  }
  if (row.params.has_penalties()) {
    const SamplingParams& p = row.params;
    for (const auto& [id, c] : row.counts) {
      if (!vocab.contains(id)) continue;
      const int64_t i = id - vocab.begin;
      if (row.top_logprobs >= 0) st.saved.emplace_back(i, x[i]);
      x[i] = penalised(x[i], c, p);
    }
    std::sort(st.saved.begin(), st.saved.end());
  }
  if (is_greedy(row)) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i)
      if (best < 0 || x[i] > x[best]) best = i;
    out.push_back(best < 0 ? kNoKey : float_key(x[best]));
    out.push_back(best < 0 ? -1 : vocab.begin + best);
    out.push_back(best < 0 ? 0 : float_word(raw_at(x, st.saved, best)));
    return;
  }
  // Sampled: the scaled logits z = x / temperature (recomputed alike after the gather).
  const float t = row.params.temperature;
  const int k = row.params.top_k;
  if (k > 0) scratch.resize(size_t(n));
  float m_local = kNegInf;
  for (int64_t i = 0; i < n; ++i) {
    const float z = x[i] / t;
    m_local = std::max(m_local, z);
    if (k > 0) scratch[size_t(i)] = z;
  }
  out.push_back(float_word(m_local));
  if (k > 0) {
    // The k largest values (as a multiset: all kth_largest needs), in any order.
    const size_t kk = std::min(scratch.size(), size_t(k));
    if (kk > 0 && kk < scratch.size())
      std::nth_element(scratch.begin(), scratch.begin() + (kk - 1), scratch.end(),
                       std::greater<float>());
    for (size_t j = 0; j < size_t(k); ++j) out.push_back(float_word(j < kk ? scratch[j] : kNegInf));
  }
}

// Phase 1, after the gather: logprob normaliser and top alternatives, the greedy token, or the
// sampled row's max and top-k threshold (then its local candidates).
void decode_row_stats(RowState& st, RowSample& res, const float* x, int64_t n,
                      const RowSampling& row, const std::vector<int64_t>& all, int64_t words,
                      int n_ranks) {
  auto at = [&](int r, int64_t w) { return all[size_t(r * words + st.offset + w)]; };
  int64_t w0 = 0;
  if (row.top_logprobs >= 0) {
    float mx = kNegInf;
    for (int r = 0; r < n_ranks; ++r) mx = std::max(mx, word_float(at(r, 0)));
    double s = 0;
    for (int r = 0; r < n_ranks; ++r) {
      const float mr = word_float(at(r, 0));
      if (mr > kNegInf) s += word_double(at(r, 1)) * std::exp(double(mr) - double(mx));
    }
    st.lse = double(mx) + std::log(s);
    std::vector<std::pair<float, int64_t>> cands;
    for (int r = 0; r < n_ranks; ++r)
      for (int j = 0; j < row.top_logprobs; ++j)
        if (const int64_t id = at(r, 3 + 2 * j); id >= 0)
          cands.emplace_back(word_float(at(r, 2 + 2 * j)), id);
    const size_t keep = std::min(cands.size(), size_t(row.top_logprobs));
    std::partial_sort(cands.begin(), cands.begin() + keep, cands.end(),
                      [](const auto& p, const auto& q) {
                        return p.first > q.first || (p.first == q.first && p.second < q.second);
                      });
    for (size_t j = 0; j < keep; ++j)
      res.top.emplace_back(int32_t(cands[j].second), float(double(cands[j].first) - st.lse));
    w0 = 2 + 2 * int64_t(row.top_logprobs);
  }
  if (is_greedy(row)) {
    // Best (key, lowest id) over ranks: the lowest id among equal logits, as the naive argmax.
    int64_t key = kNoKey, id = -1;
    float raw = 0;
    for (int r = 0; r < n_ranks; ++r) {
      const int64_t k = at(r, w0), i = at(r, w0 + 1);
      if (i >= 0 && (id < 0 || k > key || (k == key && i < id)))
        key = k, id = i, raw = word_float(at(r, w0 + 2));
    }
    TP_CHECK(id >= 0, "[sample_batch] no logits on any rank");
    res.token = int32_t(id);
    if (row.top_logprobs >= 0) res.logprob = float(double(raw) - st.lse);
    return;
  }
  for (int r = 0; r < n_ranks; ++r) st.m = std::max(st.m, word_float(at(r, w0)));
  if (const int k = row.params.top_k; k > 0) {
    std::vector<float> tops;
    tops.reserve(size_t(k) * size_t(n_ranks));
    for (int r = 0; r < n_ranks; ++r)
      for (int j = 0; j < k; ++j) tops.push_back(word_float(at(r, w0 + 1 + j)));
    st.tau = kth_largest(std::move(tops), k);
  }
  // Every threshold evaluated from here on is >= tau: keep only those positions.
  const float t = row.params.temperature;
  if (st.tau == kNegInf)
    st.cand.index.reserve(size_t(n)), st.cand.z.reserve(size_t(n)), st.cand.e.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const float z = x[i] / t;
    if (!(z >= st.tau)) continue;
    st.cand.index.push_back(int32_t(i));
    st.cand.z.push_back(z);
    st.cand.e.push_back(std::exp(double(z) - double(st.m)));
  }
}

// Phase 2: the top-p thresholds. Finds, per row, the largest float key t in [tau, m] with
// mass(z >= t) >= top_p * mass(z >= tau). mass is monotone (a sum of fewer non-negative terms in
// the same order rounds no higher), so that t is unique and equals sampler.cpp's bisection
// whatever the probing order. Round 0 probes tau, m and the first midpoint of every top-p row;
// each later round probes the midpoint of every row still bisecting; one all_gather per round.
void top_p_thresholds(std::vector<RowState>& st, std::span<const RowSampling> rows,
                      Communicator& tp) {
  std::vector<size_t> active;
  for (size_t i = 0; i < rows.size(); ++i)
    if (!is_greedy(rows[i]) && rows[i].params.top_p < 1.0f) active.push_back(i);
  if (active.empty()) return;
  const int n_ranks = tp.size();
  // Round 0.
  std::vector<int64_t> mine, all;
  for (size_t i : active) {
    RowState& s = st[i];
    s.a = float_key(s.tau), s.b = float_key(s.m);
    mine.push_back(double_word(s.cand.mass_at_least(s.tau)));
    mine.push_back(double_word(s.cand.mass_at_least(s.m)));
    mine.push_back(
        double_word(s.b - s.a > 1 ? s.cand.mass_at_least(key_float(s.a + (s.b - s.a) / 2)) : 0.0));
  }
  all.resize(mine.size() * size_t(n_ranks));
  tp.all_gather(mine.data(), all.data(), int64_t(mine.size()), DType::kI64);
  std::vector<double> sums = sum_over_ranks(all, mine.size(), n_ranks);
  std::vector<size_t> still;
  for (size_t j = 0; j < active.size(); ++j) {
    RowState& s = st[active[j]];
    s.target = double(rows[active[j]].params.top_p) * sums[3 * j];
    float t;
    if (sums[3 * j + 1] >= s.target) {
      t = s.m;
    } else {
      if (s.b - s.a > 1) {
        const int64_t mid = s.a + (s.b - s.a) / 2;
        (sums[3 * j + 2] >= s.target ? s.a : s.b) = mid;
        if (s.a == mid) s.cand.drop_below(key_float(mid));
      }
      if (s.b - s.a > 1) {
        still.push_back(active[j]);
        continue;
      }
      t = key_float(s.a);
    }
    s.tau = std::max(s.tau, t);
  }
  // Later rounds: invariant mass(a) >= target > mass(b).
  while (!still.empty()) {
    mine.clear();
    for (size_t i : still) {
      const RowState& s = st[i];
      mine.push_back(double_word(s.cand.mass_at_least(key_float(s.a + (s.b - s.a) / 2))));
    }
    all.resize(mine.size() * size_t(n_ranks));
    tp.all_gather(mine.data(), all.data(), int64_t(mine.size()), DType::kI64);
    sums = sum_over_ranks(all, mine.size(), n_ranks);
    std::vector<size_t> next;
    for (size_t j = 0; j < still.size(); ++j) {
      RowState& s = st[still[j]];
      const int64_t mid = s.a + (s.b - s.a) / 2;
      (sums[j] >= s.target ? s.a : s.b) = mid;
      if (s.a == mid) s.cand.drop_below(key_float(mid));
      if (s.b - s.a > 1)
        next.push_back(still[j]);
      else
        s.tau = std::max(s.tau, key_float(s.a));
    }
    still.swap(next);
  }
}

}  // namespace

std::vector<RowSample> sample_batch(Tensor& logits_local, Range vocab,
                                    std::span<const RowSampling> rows, Communicator& tp) {
  const int64_t n_rows = int64_t(rows.size()), n = vocab.size();
  TP_CHECK(logits_local.ndim() == 2 && logits_local.dim(0) == n_rows && logits_local.dim(1) == n,
           "[sample_batch] logits_local: got ", logits_local.describe(), ", expected f32[", n_rows,
           ", ", n, "] (rows, vocab ", range_str(vocab), ")");
  TP_CHECK(logits_local.is_contiguous(), "[sample_batch] logits_local: got a strided ",
           logits_local.describe(), ", expected contiguous");
  float* logits = logits_local.data<float>();
  for (size_t i = 0; i < rows.size(); ++i) check_row(rows[i], i);
  std::vector<RowSample> out(rows.size());
  if (n_rows == 0) return out;
  const int n_ranks = tp.size();

  // Phase 1: row statistics, one all_gather.
  std::vector<RowState> st(rows.size());
  int64_t words = 0;
  for (size_t i = 0; i < rows.size(); ++i) st[i].offset = words, words += stats_words(rows[i]);
  std::vector<int64_t> mine;
  mine.reserve(size_t(words));
  std::vector<float> scratch;
  for (size_t i = 0; i < rows.size(); ++i)
    local_row_stats(st[i], logits + int64_t(i) * n, vocab, rows[i], mine, scratch);
  TP_ASSERT(int64_t(mine.size()) == words, "phase-1 payload of ", mine.size(), " words, laid out ",
            words);
  std::vector<int64_t> all(size_t(words) * size_t(n_ranks));
  tp.all_gather(mine.data(), all.data(), words, DType::kI64);
  for (size_t i = 0; i < rows.size(); ++i)
    decode_row_stats(st[i], out[i], logits + int64_t(i) * n, n, rows[i], all, words, n_ranks);

  std::vector<size_t> sampled;
  for (size_t i = 0; i < rows.size(); ++i)
    if (!is_greedy(rows[i])) sampled.push_back(i);
  if (sampled.empty()) return out;

  // Phase 2: top-p, then min-p (relative to the top probability: no collective).
  top_p_thresholds(st, rows, tp);
  for (size_t i : sampled)
    if (const float mp = rows[i].params.min_p; mp > 0.0f)
      st[i].tau = std::max(st[i].tau, st[i].m + std::log(mp));

  // Phase 3: kept mass per rank, one all_gather; the rank holding u * total walks its shard.
  mine.clear();
  for (size_t i : sampled) mine.push_back(double_word(st[i].cand.mass_at_least(st[i].tau)));
  all.resize(mine.size() * size_t(n_ranks));
  tp.all_gather(mine.data(), all.data(), int64_t(mine.size()), DType::kI64);
  std::vector<int64_t> drawn(2 * sampled.size(), kNoKey);  // (id, float key of its raw logit)
  for (size_t j = 0; j < sampled.size(); ++j) {
    const RowState& s = st[sampled[j]];
    double total = 0;
    for (int r = 0; r < n_ranks; ++r) total += word_double(all[size_t(r) * sampled.size() + j]);
    const double target = rows[sampled[j]].u * total;
    double before = 0;
    int owner = -1;
    for (int r = 0; r < n_ranks; ++r) {
      const double mr = word_double(all[size_t(r) * sampled.size() + j]);
      if (mr > 0) owner = r;  // last rank with mass: fallback for rounding at the end
      if (mr > 0 && before + mr > target) {
        owner = r;
        break;
      }
      before += mr;
    }
    TP_CHECK(owner >= 0, "[sample_batch] row ", sampled[j],
             ": nothing left to sample after filtering");
    if (tp.rank() != owner) continue;
    double acc = before;
    int64_t id = -1;
    for (size_t c = 0; c < s.cand.z.size(); ++c) {
      if (s.cand.z[c] < s.tau) continue;
      acc += s.cand.e[c];
      id = s.cand.index[c];
      if (acc > target) break;
    }
    TP_ASSERT(id >= 0, "owner rank ", owner, " holds no kept token");
    drawn[2 * j] = vocab.begin + id;
    drawn[2 * j + 1] = float_key(raw_at(logits + int64_t(sampled[j]) * n, s.saved, id));
  }

  // Phase 4: the drawn ids and their raw logits, one all_reduce (max: only the owner's are set).
  tp.all_reduce(drawn.data(), drawn.data(), int64_t(drawn.size()), DType::kI64, ReduceOp::kMax);
  for (size_t j = 0; j < sampled.size(); ++j) {
    RowSample& res = out[sampled[j]];
    res.token = int32_t(drawn[2 * j]);
    if (rows[sampled[j]].top_logprobs >= 0)
      res.logprob = float(double(key_float(drawn[2 * j + 1])) - st[sampled[j]].lse);
  }
  return out;
}

}  // namespace tensorpar
