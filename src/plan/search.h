// The search: every valid configuration of a model on a cluster, ranked by throughput within
// memory, with a one-line reason why each loses to the best.
#pragma once

#include <string>
#include <vector>

#include "plan/serve_cost.h"
#include "plan/train_cost.h"

namespace tensorpar::plan {

// Pins for the search; 0 (or empty) leaves a dimension free.
struct TrainConstraints {
  int tp = 0, pp = 0, dp = 0, ep = 0, micro_batch = 0, interleave = 0, zero = -1, sp = -1;
  std::string recompute;
};

// All valid plans (tp x pp x dp = world), fitting ones first by tokens/s, then the ones that
// do not fit by memory. `considered` receives the number of valid plans evaluated.
std::vector<TrainEstimate> search_train(const ModelSpec& m, const ClusterSpec& c,
                                        const TrainWorkload& w, const TrainConstraints& pin,
                                        long* considered = nullptr);

struct ServeConstraints {
  int tp = 0, pp = 0;
};
// Plans with tp x pp devices per replica and as many replicas as the cluster holds; the ones
// meeting the SLO (and fitting) first, by tokens/s.
std::vector<ServeEstimate> search_serve(const ModelSpec& m, const ClusterSpec& c,
                                        const ServeWorkload& w, const ServeConstraints& pin);

// Why `other` is slower than `best`: the breakdown terms that grew most, or memory.
std::string explain_train_loss(const TrainEstimate& best, const TrainEstimate& other,
                               double memory_bytes);
std::string explain_serve_loss(const ServeEstimate& best, const ServeEstimate& other);

}  // namespace tensorpar::plan
