// Published training runs the cost model is checked against: Narayanan et al. 2021 (SC21,
// arXiv 2104.04473) Table 1, GPT 1.7B-1T on DGX A100 80 GB nodes (achieved TFLOP/s per GPU,
// full recomputation), and Korthikanti et al. 2022 (arXiv 2205.05198), iteration times of 22B-1T
// with full recomputation and with sequence parallel + selective recomputation.
#pragma once

#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/train_cost.h"

namespace tensorpar::plan {

struct PublishedRun {
  std::string source;  // "narayanan2021" | "korthikanti2022"
  std::string name;
  int heads, hidden, layers, tp, pp, gpus, global_batch;
  int micro_batch;  // 0: not published (the planner picks it)
  int interleave;   // 0: not published (the planner picks it)
  bool sp;
  Recompute recompute;
  double published;  // TFLOP/s per GPU (narayanan2021) or iteration seconds (korthikanti2022)
  bool calibration;  // used to fit the efficiencies; the others are held out
};
const std::vector<PublishedRun>& published_runs();

// Korthikanti et al. 2022 Table 4: one layer of the 22B model (tp 8, micro-batch 4), forward and
// backward, in five configurations. The 2022 software's calibration data.
struct PublishedLayerTime {
  std::string name;
  bool sp;
  Recompute recompute;
  double ms;
};
const std::vector<PublishedLayerTime>& published_layer_times();

// The A100 preset's hardware running the Megatron-LM software of `source`: "narayanan2021" (the
// backward's TP collectives not overlapped) or "korthikanti2022" (overlapped, faster GEMMs; the
// preset's own efficiencies). Table 4's layer runs 3-4% faster than the 2021 fit predicts, so
// each source is predicted with its own software (docs/planner.md).
ClusterSpec published_cluster(const std::string& source);

struct RunCheck {
  PublishedRun run;
  TrainEstimate estimate;  // the planner's best plan under the run's published pins
  double predicted = 0;    // same unit as run.published
  double error = 0;        // (predicted - published) / published
};
// `cluster`: an A100 cluster with the run's software (its node count is set per run).
RunCheck check_published_run(const PublishedRun& r, const ClusterSpec& cluster);

struct LayerCheck {
  PublishedLayerTime row;
  double predicted_ms = 0;
  double error = 0;  // (predicted - published) / published
};
LayerCheck check_published_layer(const PublishedLayerTime& r, const ClusterSpec& cluster);

// Grid search of the efficiencies minimising the mean |error| over `source`'s calibration data:
// gemm_max and dp_overlap on the Narayanan 2021 rows marked `calibration`; gemm_max on the
// Korthikanti 2022 layer times (Table 4), whose iteration times (Table 5) are all held out.
// gemm_half_flops stays as given: every published GEMM is large enough that the rows cannot pin
// it down.
EfficiencySpec fit_efficiency(const std::string& source);

}  // namespace tensorpar::plan
