// The cost model against published Megatron-LM runs. Each paper's software has its efficiencies
// fitted on its own calibration data: Narayanan et al. 2021 on three rows of Table 1 (1.7B,
// 18.4B, 145.6B), Korthikanti et al. 2022 on Table 4 (one 22B layer); judged on the seven
// held-out rows of Table 1 and the eight iteration times of Korthikanti et al. Table 5.
#include "plan/published_runs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

namespace tensorpar::plan {
namespace {

struct ErrorStats {
  double sum = 0, worst = 0;
  int n = 0;
  void add(double e) { sum += std::fabs(e), worst = std::max(worst, std::fabs(e)), ++n; }
  double mean() const { return n ? sum / n : 0; }
};

TEST(PublishedRuns, EachSoftwareIsTheFitOfItsCalibrationData) {
  for (const char* source : {"narayanan2021", "korthikanti2022"}) {
    const EfficiencySpec fit = fit_efficiency(source);
    const EfficiencySpec used = published_cluster(source).eff;
    EXPECT_NEAR(fit.gemm_max, used.gemm_max, 0.005) << source;
    EXPECT_EQ(fit.dp_overlap, used.dp_overlap) << source;
  }
  // The preset is the newest software.
  const ClusterSpec preset = cluster_preset("dgx-a100-80g");
  EXPECT_EQ(preset.eff.gemm_max, published_cluster("korthikanti2022").eff.gemm_max);
  EXPECT_TRUE(preset.eff.tp_overlap);
  EXPECT_FALSE(published_cluster("narayanan2021").eff.tp_overlap);
}

// One fitted constant and five configurations: what SP and each recomputation cost or save
// relative to each other comes from the model's structure alone.
TEST(PublishedRuns, LayerTimesFollowFromTheStructure) {
  const ClusterSpec c = published_cluster("korthikanti2022");
  for (const PublishedLayerTime& r : published_layer_times()) {
    const LayerCheck k = check_published_layer(r, c);
    std::printf("Table 4 %-16s published %5.1f ms predicted %5.1f ms error %+5.1f%%\n",
                r.name.c_str(), r.ms, k.predicted_ms, 100 * k.error);
    EXPECT_LE(std::fabs(k.error), 0.03) << r.name;
  }
}

TEST(PublishedRuns, HeldOutRowsWithinTarget) {
  ErrorStats held, other;
  for (const PublishedRun& r : published_runs()) {
    const RunCheck k = check_published_run(r, published_cluster(r.source));
    std::printf("%-16s %-12s published %8.2f predicted %8.2f error %+6.1f%% mb %d v %d %s\n",
                r.source.c_str(), r.name.c_str(), r.published, k.predicted, 100 * k.error,
                k.estimate.plan.micro_batch, k.estimate.plan.interleave,
                r.calibration ? "(calibration)" : "");
    ASSERT_GT(k.predicted, 0) << r.name << ": no valid plan under the published pins";
    EXPECT_TRUE(k.estimate.fits) << r.name << " does not fit in 80 GB";
    if (r.calibration) continue;
    (r.source == "narayanan2021" ? held : other).add(k.error);
  }
  ASSERT_EQ(held.n, 7);
  EXPECT_LE(held.mean(), 0.05) << "mean held-out error, Narayanan 2021";
  EXPECT_LE(held.worst, 0.10) << "max held-out error, Narayanan 2021";
  // Korthikanti 2022 Table 5: iteration times of four sizes, none of them calibration data.
  ASSERT_EQ(other.n, 8);
  EXPECT_LE(other.mean(), 0.05) << "mean held-out error, Korthikanti 2022";
  EXPECT_LE(other.worst, 0.10) << "max held-out error, Korthikanti 2022";
}

}  // namespace
}  // namespace tensorpar::plan
