// StopMatcher (see stop_matcher.h).
#include "infer/stop_matcher.h"

#include <algorithm>

namespace tensorpar {

std::string StopMatcher::release(std::string s) {
  text_ += s;
  return s;
}

std::string StopMatcher::push(std::string_view piece, bool& stopped) {
  stopped = false;
  pending_ += piece;
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    if (s.empty()) continue;
    const size_t at = pending_.find(s);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    stopped = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return release(std::move(out));
  }
  // Keep the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_)
    for (size_t k = std::min(s.size() - (s.empty() ? 0 : 1), pending_.size()); k > keep; --k)
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return release(std::move(out));
}

std::string StopMatcher::finish() {
  std::string out = std::move(pending_);
  pending_.clear();
  return release(std::move(out));
}

}  // namespace tensorpar
