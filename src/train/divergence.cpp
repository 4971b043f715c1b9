// Divergence verdicts, skipped batches and the poisoned-batch test hook (see divergence.h).
#include "train/divergence.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "core/error.h"

namespace tensorpar {

void check_divergence_policy(const DivergencePolicy& p) {
  TP_CHECK(p.spike_factor == 0 || (std::isfinite(p.spike_factor) && p.spike_factor > 1), "[divergence] spike factor ",
           p.spike_factor, ": expected 0 (off) or a number above 1 (the loss against its running mean)");
  TP_CHECK(p.spike_window >= 3, "[divergence] spike window ", p.spike_window, ": expected at least 3 steps");
  TP_CHECK(p.max_rollbacks >= 0, "[divergence] max rollbacks ", p.max_rollbacks, ": expected >= 0");
}

PoisonedBatch parse_poisoned_batch(const std::string& spec) {
  const char* form = "expected batch:N,kind:nan|spike (N >= 1)";
  PoisonedBatch p;
  bool have_batch = false, have_kind = false;
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const size_t colon = part.find(':');
    TP_CHECK(colon != std::string::npos, "[TENSORPAR_POISON_BATCH] '", part, "' in '", spec, "' has no ':'; ", form);
    const std::string key = part.substr(0, colon), value = part.substr(colon + 1);
    if (key == "batch") {
      TP_CHECK(!have_batch, "[TENSORPAR_POISON_BATCH] 'batch' twice in '", spec, "'");
      const auto r = std::from_chars(value.data(), value.data() + value.size(), p.batch);
      TP_CHECK(r.ec == std::errc() && r.ptr == value.data() + value.size() && p.batch >= 1,
               "[TENSORPAR_POISON_BATCH] batch '", value, "' in '", spec, "': ", form);
      have_batch = true;
    } else if (key == "kind") {
      TP_CHECK(!have_kind, "[TENSORPAR_POISON_BATCH] 'kind' twice in '", spec, "'");
      TP_CHECK(value == "nan" || value == "spike", "[TENSORPAR_POISON_BATCH] kind '", value, "' in '", spec,
               "': ", form);
      p.kind = value == "nan" ? PoisonedBatch::Kind::kNan : PoisonedBatch::Kind::kSpike;
      have_kind = true;
    } else {
      TP_CHECK(false, "[TENSORPAR_POISON_BATCH] unknown key '", key, "' in '", spec, "'; ", form);
    }
  }
  TP_CHECK(have_batch && have_kind, "[TENSORPAR_POISON_BATCH] '", spec, "': ", form);
  return p;
}

int64_t batch_for_step(int64_t step_index, const std::vector<int64_t>& skipped) {
  int64_t b = step_index + 1;
  for (int64_t s : skipped)  // ascending: each skipped batch at or before b pushes b one further
    if (s <= b) ++b;
  return b;
}

std::vector<int64_t> merge_skipped(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  for (int64_t s : a) TP_CHECK(s >= 1, "[divergence] skipped batch ", s, ": batches are numbered from 1");
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  return a;
}

std::optional<std::string> DivergenceMonitor::verdict(float loss, double grad_norm) const {
  char b[160];
  if (!std::isfinite(loss)) {
    std::snprintf(b, sizeof(b), "non-finite loss %g", double(loss));
    return b;
  }
  if (!std::isfinite(grad_norm)) {
    std::snprintf(b, sizeof(b), "non-finite gradient norm %g", grad_norm);
    return b;
  }
  if (p_.spike_factor > 0 && window_.size() >= 3) {
    const double mean = running_mean();
    if (double(loss) > p_.spike_factor * mean) {
      std::snprintf(b, sizeof(b), "loss spike %.4f > %g x running mean %.4f of the last %zu steps", double(loss),
                    p_.spike_factor, mean, window_.size());
      return b;
    }
  }
  return std::nullopt;
}

void DivergenceMonitor::accept(float loss) {
  window_.push_back(loss);
  if (int64_t(window_.size()) > p_.spike_window) window_.erase(window_.begin());
}

double DivergenceMonitor::running_mean() const {
  if (window_.empty()) return NAN;
  return std::accumulate(window_.begin(), window_.end(), 0.0) / double(window_.size());
}

nlohmann::json DivergenceMonitor::to_json() const {
  return window_;
}

void DivergenceMonitor::from_json(const nlohmann::json& j) {
  TP_CHECK(j.is_array(), "[divergence] loss window in the checkpoint: expected an array, got ", j.dump());
  window_.clear();
  for (const nlohmann::json& v : j) {
    TP_CHECK(v.is_number(), "[divergence] loss window in the checkpoint holds ", v.dump(), ", expected numbers");
    accept(v.get<float>());
  }
}

}  // namespace tensorpar
