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

struct RunCheck {
  PublishedRun run;
  TrainEstimate estimate;  // the planner's best plan under the run's published pins
  double predicted = 0;    // same unit as run.published
  double error = 0;        // (predicted - published) / published
};
// `cluster`: an A100 cluster (its node count is set per run).
RunCheck check_published_run(const PublishedRun& r, const ClusterSpec& cluster);

// Grid search of gemm_max and dp_overlap minimising the mean |error| over the runs marked
// `calibration`. gemm_half_flops stays as given: every published GEMM is large enough that the
// rows cannot pin it down.
EfficiencySpec fit_efficiency(const ClusterSpec& cluster);

}  // namespace tensorpar::plan
