// What a training run holds: its parameter count and, per rank of the TP group, the bytes of the
// f32 master weights, gradients and AdamW moments. The count comes from each parameter's global
// shape, so it is exact at any TP size (Replicated tensors and replicated kv heads counted once).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/causal_lm.h"

namespace tensorpar {

// Parameters of the whole model (every tensor's global element count, once). Local: no collective.
int64_t parameter_count(const std::vector<ParamShard>& params);

// Bytes this rank holds for training state: every local slice in f32, times 4 when it trains
// (value, gradient, AdamW exp_avg and exp_avg_sq), times 1 when frozen; the moments divided
// over `optimizer_shards` data-parallel ranks under the distributed optimizer.
int64_t training_state_bytes(const std::vector<ParamShard>& params, int optimizer_shards = 1);

struct TrainMemoryReport {
  int64_t parameters = 0;
  std::vector<int64_t> state_bytes_per_rank;  // element r: TP rank r's training_state_bytes
  int optimizer_shards = 1;

  // "10.02M parameters; params+grads+AdamW per rank: 60.1 / 58.3 MiB"
  std::string summary() const;
};

// Collective over tp (and ep): every rank gets the whole report. ep: the EP group when experts are
// spread over data-parallel ranks (ParamShard::expert), whose experts are counted too.
TrainMemoryReport train_memory_report(const std::vector<ParamShard>& params, Communicator& tp,
                                      Communicator* ep = nullptr, int optimizer_shards = 1);

}  // namespace tensorpar
