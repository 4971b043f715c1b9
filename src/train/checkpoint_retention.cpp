// Checkpoint retention: which step directories go, and removing them crash-safely.
#include "train/checkpoint_retention.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/error.h"

namespace tensorpar {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kStepPrefix = "step-";
constexpr std::string_view kRemovingPrefix = ".del-step-";

// N from "step-N" (digits only), nullopt otherwise.
std::optional<int64_t> step_of(std::string_view name, std::string_view prefix = kStepPrefix) {
  if (name.substr(0, prefix.size()) != prefix || name.size() == prefix.size()) return std::nullopt;
  const std::string_view digits = name.substr(prefix.size());
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

void check_retention(const RetentionPolicy& p) {
  TP_CHECK(p.keep_last >= 0, "[train] --keep-last: got ", p.keep_last,
           ", expected >= 0 (0 keeps every checkpoint)");
  TP_CHECK(p.keep_every >= 0, "[train] --keep-every: got ", p.keep_every, ", expected >= 0");
  TP_CHECK(p.keep_every == 0 || p.keep_last > 0, "[train] --keep-every ", p.keep_every,
           " keeps checkpoints in addition to --keep-last N, and without --keep-last every "
           "checkpoint is kept anyway: pass --keep-last N too");
}

std::vector<int64_t> checkpoint_steps(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::optional<int64_t> s = step_of(e.path().filename().string());
    if (s && fs::exists(e.path() / "index.json")) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

int64_t latest_step_name(const std::string& root) {
  std::ifstream f(fs::path(root) / "latest");
  std::string name;
  if (!f || !std::getline(f, name)) return -1;
  return step_of(name).value_or(-1);
}

std::vector<int64_t> steps_to_remove(const std::vector<int64_t>& steps, int64_t latest,
                                     const RetentionPolicy& policy) {
  if (!policy.prunes() || latest < 0) return {};
  std::vector<int64_t> older;  // at or before latest, newest first
  for (int64_t s : steps)
    if (s <= latest) older.push_back(s);
  std::sort(older.rbegin(), older.rend());
  std::vector<int64_t> out;
  for (size_t i = 0; i < older.size(); ++i) {
    const int64_t s = older[i];
    const bool newest = int64_t(i) < policy.keep_last || s == latest;
    const bool milestone = policy.keep_every > 0 && s % policy.keep_every == 0;
    if (!newest && !milestone) out.push_back(s);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> prune_checkpoints(const std::string& root, const RetentionPolicy& policy) {
  if (!policy.prunes()) return {};
  const int64_t latest = latest_step_name(root);
  if (latest < 0) return {};
  std::error_code ec;
  // Leftovers of a removal a crash interrupted: already renamed away from step-N, never loadable.
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec))
    if (step_of(e.path().filename().string(), kRemovingPrefix)) fs::remove_all(e.path(), ec);
  std::vector<std::string> removed;
  for (int64_t s : steps_to_remove(checkpoint_steps(root), latest, policy)) {
    const fs::path dir = fs::path(root) / (std::string(kStepPrefix) + std::to_string(s));
    const fs::path doomed = fs::path(root) / (std::string(kRemovingPrefix) + std::to_string(s));
    fs::rename(dir, doomed, ec);
    TP_CHECK(!ec, "[prune_checkpoints] cannot rename '", dir.string(), "' to '", doomed.string(),
             "' to remove it (--keep-last ", policy.keep_last, "): ", ec.message());
    fs::remove_all(doomed, ec);
    TP_CHECK(!ec, "[prune_checkpoints] cannot remove '", doomed.string(), "': ", ec.message());
    removed.push_back(dir.string());
  }
  return removed;
}

}  // namespace tensorpar
