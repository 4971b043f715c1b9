// The serving cost model: weights and KV cache per device, prefill (compute-bound) and decode
// (memory-bandwidth-bound) latency, TP communication per token, the concurrency memory allows
// and the throughput at a latency target. Formulas: docs/planner.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "plan/cluster.h"
#include "plan/model_spec.h"

namespace tensorpar::plan {

struct ServeWorkload {
  int64_t prompt_tokens = 512;
  int64_t output_tokens = 256;
  double weight_bytes = 2;  // per parameter (2: bf16; ~0.56: Q4_1)
  // Each weight format's fraction of the bytes ("q4_1", "bf16", ...; a Q4_K_M GGUF is Q5_0, Q8_0,
  // Q6_K and Q4_K), each streamed at its measured rate if the cluster has one. Empty: all bytes
  // at the memory bandwidth.
  std::map<std::string, double> weight_format_shares;
  double kv_bytes = 2;      // per KV element
  double slo_ttft_s = 0;    // 0: no target
  double slo_itl_s = 0;
  int64_t concurrency = 0;  // 0: the most the plan sustains within memory and the ITL target
};

struct ServePlan {
  int tp = 1, pp = 1, replicas = 1;  // replicas: independent copies (data parallel)
};

struct ServeEstimate {
  ServePlan plan;
  double weight_bytes = 0;      // per device
  double kv_bytes_per_seq = 0;  // per device, at prompt + output tokens
  int64_t max_concurrency = 0;  // per replica, within memory
  int64_t concurrency = 0;      // per replica, the one evaluated
  double memory_bytes = 0;      // per device at that concurrency
  double ttft_s = 0;            // one prompt, no queueing
  double itl_s = 0;             // at `concurrency`, mid-generation context
  double tokens_per_s = 0;      // output tokens/s over all replicas
  bool fits = false;
  bool meets_slo = false;
  // Breakdown of the two latencies.
  double prefill_compute_s = 0, prefill_comm_s = 0;
  double decode_weights_s = 0, decode_kv_s = 0, decode_compute_s = 0, decode_comm_s = 0;
  double decode_other_s = 0;  // attention and the fixed time a layer (EfficiencySpec::decode_*)
};

// Empty when the plan is valid on the cluster, else why not.
std::string serve_plan_problem(const ModelSpec& m, const ClusterSpec& c, const ServePlan& p);
ServeEstimate estimate_serve(const ModelSpec& m, const ClusterSpec& c, const ServeWorkload& w,
                             const ServePlan& p);
// Decode step time (ITL) of one replica at `concurrency` sequences of `context` tokens.
double decode_step_time(const ModelSpec& m, const ClusterSpec& c, const ServeWorkload& w,
                        const ServePlan& p, double concurrency, double context,
                        ServeEstimate* breakdown = nullptr);

}  // namespace tensorpar::plan
