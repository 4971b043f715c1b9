// Enumeration over tp, pp, dp, ep, sp, micro-batch, interleave, recompute and ZeRO. Any TP size
// is valid in tensorpar (uneven shards, replicated KV heads), so tp runs over every divisor of
// the world; pp over divisors up to the layer count.
#include "plan/search.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace tensorpar::plan {

namespace {

std::vector<int> divisors(long n, long limit) {
  std::vector<int> d;
  for (long i = 1; i <= n && i <= limit; ++i)
    if (n % i == 0) d.push_back(int(i));
  return d;
}

bool pinned_out(int pin, int value) {
  return pin > 0 && pin != value;
}

std::string pct(double a, double b) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.0f%%", 100.0 * (a - b) / std::max(b, 1e-30));
  return buf;
}

}  // namespace

std::vector<TrainEstimate> search_train(const ModelSpec& m, const ClusterSpec& c,
                                        const TrainWorkload& w, const TrainConstraints& pin,
                                        long* considered) {
  std::vector<TrainEstimate> out;
  long n = 0;
  const long world = c.world();
  const std::vector<Recompute> rcs = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  for (int tp : divisors(world, world)) {
    if (pinned_out(pin.tp, tp)) continue;
    for (int pp : divisors(world / tp, m.layers)) {
      if (pinned_out(pin.pp, pp)) continue;
      const int dp = int(world / tp / pp);
      if (pinned_out(pin.dp, dp) || w.global_batch % dp != 0) continue;
      for (int mb : divisors(w.global_batch / dp, 64)) {
        if (pinned_out(pin.micro_batch, mb)) continue;
        for (int v : divisors(m.layers, pp > 1 ? 8 : 1)) {
          if (pinned_out(pin.interleave, v)) continue;
          for (int ep : divisors(dp, m.is_moe() ? m.experts : 1)) {
            if (pinned_out(pin.ep, ep)) continue;
            for (Recompute rc : rcs) {
              if (!pin.recompute.empty() && parse_recompute(pin.recompute) != rc) continue;
              for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
                if (pin.sp >= 0 && pin.sp != sp) continue;
                for (int zero = 0; zero <= (dp > 1 ? 1 : 0); ++zero) {
                  if (pin.zero >= 0 && pin.zero != zero) continue;
                  TrainPlan p{tp, pp, dp, ep, sp == 1, mb, v, rc, zero};
                  if (!train_plan_problem(m, c, w, p).empty()) continue;
                  ++n;
                  out.push_back(estimate_train(m, c, w, p));
                }
              }
            }
          }
        }
      }
    }
  }
  if (considered) *considered = n;
  // Within memory first; then faster; ties to the smaller memory footprint.
  std::stable_sort(out.begin(), out.end(), [](const TrainEstimate& a, const TrainEstimate& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits && a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
    if (!a.fits) return a.memory.total() < b.memory.total();
    return a.memory.total() < b.memory.total();
  });
  return out;
}

std::vector<ServeEstimate> search_serve(const ModelSpec& m, const ClusterSpec& c,
                                        const ServeWorkload& w, const ServeConstraints& pin) {
  std::vector<ServeEstimate> out;
  const long world = c.world();
  for (int tp : divisors(world, world)) {
    if (pinned_out(pin.tp, tp)) continue;
    for (int pp : divisors(world / tp, m.layers)) {
      if (pinned_out(pin.pp, pp)) continue;
      const ServePlan p{tp, pp, int(world / (long(tp) * pp))};
      if (!serve_plan_problem(m, c, p).empty()) continue;
      out.push_back(estimate_serve(m, c, w, p));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const ServeEstimate& a, const ServeEstimate& b) {
    if (a.meets_slo != b.meets_slo) return a.meets_slo;
    if (a.fits != b.fits) return a.fits;
    if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
    return a.itl_s < b.itl_s;
  });
  return out;
}

std::string explain_train_loss(const TrainEstimate& best, const TrainEstimate& other,
                               double memory_bytes) {
  if (!other.fits) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "needs %.1f GiB per device, over the %.1f GiB there is",
                  other.memory.total() / (1 << 30), memory_bytes / (1 << 30));
    return buf;
  }
  const std::pair<const char*, double> terms[] = {
      {"gemm", other.time.gemm - best.time.gemm},
      {"attention", other.time.attention - best.time.attention},
      {"elementwise", other.time.elementwise - best.time.elementwise},
      {"tp_comm", other.time.tp_comm - best.time.tp_comm},
      {"ep_comm", other.time.ep_comm - best.time.ep_comm},
      {"pp_comm", other.time.pp_comm - best.time.pp_comm},
      {"bubble", other.time.bubble - best.time.bubble},
      {"dp_comm", other.time.dp_comm - best.time.dp_comm},
      {"optimizer", other.time.optimizer - best.time.optimizer}};
  std::vector<std::pair<const char*, double>> grew(std::begin(terms), std::end(terms));
  std::sort(grew.begin(), grew.end(), [](auto& a, auto& b) { return a.second > b.second; });
  std::string why = pct(other.step_time_s, best.step_time_s) + " step time:";
  for (int i = 0; i < 2 && grew[size_t(i)].second > 0; ++i) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %s +%.3g s", grew[size_t(i)].first, grew[size_t(i)].second);
    why += buf;
  }
  return why;
}

std::string explain_serve_loss(const ServeEstimate& best, const ServeEstimate& other) {
  if (!other.fits) return "weights + one sequence's KV cache exceed device memory";
  if (best.meets_slo && !other.meets_slo) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "misses the SLO (TTFT %.1f ms, ITL %.1f ms)",
                  other.ttft_s * 1e3, other.itl_s * 1e3);
    return buf;
  }
  return pct(other.tokens_per_s, best.tokens_per_s) + " tokens/s at concurrency " +
         std::to_string(other.concurrency) + " per replica";
}

}  // namespace tensorpar::plan
