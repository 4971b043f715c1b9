// Parameter count and per-rank training-state bytes (see memory_accounting.h).
#include "train/memory_accounting.h"

#include <cstdio>

namespace tensorpar {

int64_t parameter_count(const std::vector<ParamShard>& params) {
  int64_t n = 0;
  for (const ParamShard& p : params) {
    int64_t e = 1;
    for (int64_t d : p.global_shape) e *= d;
    n += e;
  }
  return n;
}

int64_t training_state_bytes(const std::vector<ParamShard>& params, int optimizer_shards) {
  int64_t bytes = 0, moments = 0;
  for (const ParamShard& p : params) {
    bytes += p.value->numel() * int64_t(sizeof(float)) * (p.grad ? 2 : 1);
    if (p.grad) moments += 2 * p.value->numel() * int64_t(sizeof(float));
  }
  return bytes + (moments + optimizer_shards - 1) / optimizer_shards;
}

std::string TrainMemoryReport::summary() const {
  char b[64];
  std::snprintf(b, sizeof(b), "%.2fM parameters; params+grads+AdamW%s per rank:", double(parameters) / 1e6,
                optimizer_shards > 1 ? " (moments 1/dp)" : "");
  std::string s = b;
  for (size_t r = 0; r < state_bytes_per_rank.size(); ++r) {
    std::snprintf(b, sizeof(b), "%s %.1f", r ? " /" : "",
                  double(state_bytes_per_rank[r]) / (1 << 20));
    s += b;
  }
  return s + " MiB";
}

TrainMemoryReport train_memory_report(const std::vector<ParamShard>& params, Communicator& tp, Communicator* ep,
                                      int optimizer_shards) {
  TrainMemoryReport r;
  r.optimizer_shards = optimizer_shards;
  r.parameters = parameter_count(params);
  if (ep && ep->size() > 1) {  // this rank's experts are counted above; add the other EP ranks'
    std::vector<ParamShard> experts;
    for (const ParamShard& p : params)
      if (p.expert) experts.push_back(p);
    int64_t mine = parameter_count(experts);
    std::vector<int64_t> all(size_t(ep->size()));
    ep->all_gather(&mine, all.data(), 1, DType::kI64);
    for (int i = 0; i < ep->size(); ++i)
      if (i != ep->rank()) r.parameters += all[size_t(i)];
  }
  const int64_t mine = training_state_bytes(params, optimizer_shards);
  r.state_bytes_per_rank.resize(size_t(tp.size()));
  tp.all_gather(&mine, r.state_bytes_per_rank.data(), 1, DType::kI64);
  return r;
}

}  // namespace tensorpar
