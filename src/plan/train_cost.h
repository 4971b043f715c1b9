// The training cost model: memory per device and step time of one configuration
// (tp, pp, dp, ep, sp, micro-batch, interleave, recompute, zero) of a model on a cluster.
// Formulas and assumptions: docs/planner.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/model_spec.h"

namespace tensorpar::plan {

enum class Recompute : uint8_t { kNone, kSelective, kFull };
const char* recompute_name(Recompute r);
Recompute parse_recompute(const std::string& s);  // none | selective | full

struct TrainPlan {
  int tp = 1, pp = 1, dp = 1, ep = 1;
  bool sp = false;
  int micro_batch = 1;
  int interleave = 1;  // v model chunks per pipeline stage
  Recompute recompute = Recompute::kNone;
  int zero = 0;  // 1: distributed optimizer (optimizer state sharded over DP)
};

struct TrainWorkload {
  int64_t global_batch = 0;     // B sequences per iteration
  int64_t seq = 0;              // s tokens per sequence
  double grad_bytes = 4;        // gradient accumulation dtype (Megatron: fp32 main grads)
  double weight_bytes = 2;      // working weights (bf16; 4 for f32 training)
  double optimizer_bytes = 12;  // fp32 master + two moments; 8 for f32 training (no master)
  double activation_bytes = 2;  // saved activations and communicated tensors
};

struct TrainMemory {  // bytes per device, on the fullest pipeline stage
  double weights = 0, grads = 0, optimizer = 0, activations = 0, reserved = 0;
  double total() const { return weights + grads + optimizer + activations + reserved; }
};

struct TrainTime {                                  // seconds per iteration on the critical path
  double gemm = 0, attention = 0, elementwise = 0;  // compute of the m micro-batches
  double tp_comm = 0, ep_comm = 0, pp_comm = 0;
  double bubble = 0;   // (p - 1) / v micro-batch slots of idle stage
  double dp_comm = 0;  // exposed part of the gradient reduction
  double optimizer = 0;
  double total() const {
    return gemm + attention + elementwise + tp_comm + ep_comm + pp_comm + bubble + dp_comm +
           optimizer;
  }
};

struct TrainEstimate {
  TrainPlan plan;
  TrainMemory memory;                    // the fullest pipeline stage's device
  std::vector<double> stage_memory_bytes;  // per device of each pipeline stage, first to last
  TrainTime time;
  int64_t micro_batches = 0;  // m per pipeline per iteration
  double step_time_s = 0;
  double tokens_per_s = 0;
  double hardware_flops_per_device = 0;  // FLOP/s counting recomputation (Narayanan's figure)
  double mfu = 0;                        // model FLOPs (no recomputation) / peak
  bool fits = false;                     // memory within the device
};

// Empty when the plan can run the workload on the cluster; otherwise why not (one line).
std::string train_plan_problem(const ModelSpec& m, const ClusterSpec& c, const TrainWorkload& w,
                               const TrainPlan& p);
// Throws the problem above when the plan is invalid.
TrainEstimate estimate_train(const ModelSpec& m, const ClusterSpec& c, const TrainWorkload& w,
                             const TrainPlan& p);

// Seconds one micro-batch of `seq` tokens per sequence takes through one transformer layer on
// the plan's devices: forward, backward and any recomputation (Korthikanti et al. 2022, Table 4's
// measure).
double layer_seconds(const ModelSpec& m, const ClusterSpec& c, const TrainPlan& p, double seq,
                     double act_bytes = 2);

// Activation bytes one layer holds for one micro-batch between its forward and backward
// (Korthikanti et al. 2022, generalised to GQA and gated MLPs; 16-bit activations).
// `fused_attention`: no s x s scores are kept (flash attention); `fused_qkv_copy`: the fused
// q/k/v projection's output is kept beside q, k and v (tensorpar).
double layer_activation_bytes(const ModelSpec& m, double b, double s, int tp, bool sp, Recompute r,
                              bool fused_attention, bool fused_qkv_copy = false);

}  // namespace tensorpar::plan
