// The search: every plan it returns is valid and fills the cluster, the ranking is by
// throughput within memory, pins are honoured, and a pinned search agrees with a direct estimate.
#include "plan/search.h"

#include <gtest/gtest.h>

namespace tensorpar::plan {
namespace {

ModelSpec llama_7b() {
  ModelSpec m;
  m.name = "llama-7b";
  m.layers = 32, m.hidden = 4096, m.heads = 32, m.kv_heads = 32, m.head_dim = 128;
  m.ffn = 11008, m.vocab = 32000;
  return m;
}

TEST(Search, RankedValidAndWithinMemory) {
  const ModelSpec m = llama_7b();
  const ClusterSpec c = cluster_preset("dgx-a100-80g", 2);
  const TrainWorkload w{256, 2048};
  long considered = 0;
  const auto plans = search_train(m, c, w, {}, &considered);
  ASSERT_FALSE(plans.empty());
  EXPECT_EQ(long(plans.size()), considered);
  bool seen_unfit = false;
  for (size_t i = 0; i < plans.size(); ++i) {
    const TrainPlan& p = plans[i].plan;
    EXPECT_EQ(long(p.tp) * p.pp * p.dp, c.world());
    EXPECT_TRUE(train_plan_problem(m, c, w, p).empty());
    EXPECT_EQ(plans[i].fits, plans[i].memory.total() <= c.memory_bytes);
    if (!plans[i].fits)
      seen_unfit = true;
    else {
      EXPECT_FALSE(seen_unfit) << "a fitting plan after one that does not fit";
    }
    if (i > 0 && plans[i].fits) {
      EXPECT_GE(plans[i - 1].tokens_per_s, plans[i].tokens_per_s);
    }
  }
  EXPECT_TRUE(plans.front().fits);
  // A 7B model needs its 16 x 7B bytes of state split: plain dp (tp=pp=1, zero 0) cannot fit.
  for (const auto& e : plans)
    if (e.plan.tp == 1 && e.plan.pp == 1 && e.plan.zero == 0) {
      EXPECT_FALSE(e.fits);
    }
}

TEST(Search, PinsAreHonouredAndAgreeWithDirectEstimate) {
  const ModelSpec m = llama_7b();
  const ClusterSpec c = cluster_preset("dgx-h100");
  const TrainWorkload w{64, 4096};
  TrainConstraints pin;
  pin.tp = 4, pin.pp = 2, pin.micro_batch = 1, pin.recompute = "selective", pin.sp = 1,
  pin.zero = 0;
  pin.interleave = 2;
  const auto plans = search_train(m, c, w, pin);
  ASSERT_EQ(plans.size(), 1u);
  const TrainEstimate direct =
      estimate_train(m, c, w, {4, 2, 1, 1, true, 1, 2, Recompute::kSelective, 0});
  EXPECT_DOUBLE_EQ(plans[0].step_time_s, direct.step_time_s);
  EXPECT_DOUBLE_EQ(plans[0].memory.total(), direct.memory.total());
}

TEST(Search, MoeSearchUsesExpertParallelism) {
  ModelSpec m = llama_7b();
  m.experts = 8, m.experts_per_token = 2, m.ffn = 14336, m.kv_heads = 8;
  const ClusterSpec c = cluster_preset("dgx-h100", 4);
  const auto plans = search_train(m, c, {256, 4096}, {});
  ASSERT_FALSE(plans.empty());
  bool any_ep = false;
  for (const auto& e : plans) any_ep |= e.plan.ep > 1;
  EXPECT_TRUE(any_ep);
  // Memory of expert weights per device falls as ep grows (same tp, pp, dp).
  TrainPlan p{8, 1, 4, 1, true, 1, 1, Recompute::kSelective, 1};
  const double w1 = estimate_train(m, c, {256, 4096}, p).memory.weights;
  p.ep = 4;
  EXPECT_LT(estimate_train(m, c, {256, 4096}, p).memory.weights, w1);
}

TEST(Search, ExplanationsNameTheCause) {
  const ModelSpec m = llama_7b();
  const ClusterSpec c = cluster_preset("dgx-a100-80g", 2);
  const auto plans = search_train(m, c, {256, 2048}, {});
  ASSERT_GE(plans.size(), 2u);
  EXPECT_NE(explain_train_loss(plans[0], plans[1], c.memory_bytes).find("step time"),
            std::string::npos);
  EXPECT_NE(explain_train_loss(plans[0], plans.back(), c.memory_bytes).find("GiB"),
            std::string::npos);
}

}  // namespace
}  // namespace tensorpar::plan
