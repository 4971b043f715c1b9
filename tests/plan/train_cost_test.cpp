// The training cost model against the closed forms of Korthikanti et al. 2022 (activations) and
// Narayanan et al. 2021 (bubble, TP traffic, model state), plus ordering properties.
#include "plan/train_cost.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "plan/comm_cost.h"
#include "plan/device_cost.h"

namespace tensorpar::plan {
namespace {

// A GPT whose sizes divide by every tp used below.
ModelSpec gpt() {
  return megatron_gpt(16, 1024, 16, 51200, 1024);
}

// Ideal links (no latency, full bandwidth) make communication times pure byte counts.
ClusterSpec ideal(int devices) {
  ClusterSpec c = cluster_preset("dgx-a100-80g");
  c.devices_per_node = devices;
  c.intra.latency_s = c.inter.latency_s = 0;
  c.eff.link = 1;
  c.eff.tp_overlap = false;  // every collective on the critical path
  return c;
}

TEST(TrainCost, ActivationsMatchKorthikanti) {
  const ModelSpec m = gpt();
  const double s = 1024, b = 2, h = 1024, a = 16;
  for (int t : {1, 2, 4, 8}) {
    const double sbh = s * b * h;
    const bool fused = false;
    EXPECT_NEAR(layer_activation_bytes(m, b, s, t, false, Recompute::kNone, fused),
                sbh * (10 + 24.0 / t + 5 * a * s / (h * t)), 1)
        << "tp " << t;
    if (t > 1) {
      EXPECT_NEAR(layer_activation_bytes(m, b, s, t, true, Recompute::kNone, fused),
                  sbh / t * (34 + 5 * a * s / h), 1)
          << "tp+sp " << t;
    }
    EXPECT_NEAR(layer_activation_bytes(m, b, s, t, true, Recompute::kSelective, fused),
                34 * sbh / t, 1)
        << "tp+sp+selective " << t;
    EXPECT_NEAR(layer_activation_bytes(m, b, s, t, false, Recompute::kSelective, fused),
                sbh * (10 + 24.0 / t), 1)
        << "tp+selective " << t;
    EXPECT_NEAR(layer_activation_bytes(m, b, s, t, false, Recompute::kFull, fused), 2 * sbh, 1);
  }
}

TEST(TrainCost, ModelStateBytesPerParameter) {
  const ModelSpec m = gpt();
  const ClusterSpec c = ideal(8);
  const TrainWorkload w{64, 1024};
  const TrainEstimate plain =
      estimate_train(m, c, w, {1, 1, 8, 1, false, 1, 1, Recompute::kFull, 0});
  const double P = double(total_parameters(m));  // tied embeddings, one stage holds all
  // Mixed-precision Adam: 2 (weights) + 4 (fp32 grads) + 12 (master + moments) = 18 bytes.
  EXPECT_NEAR(plain.memory.weights + plain.memory.grads + plain.memory.optimizer, 18 * P, 1);
  // Distributed optimizer: 6 + 12 / d.
  const TrainEstimate zero =
      estimate_train(m, c, w, {1, 1, 8, 1, false, 1, 1, Recompute::kFull, 1});
  EXPECT_NEAR(zero.memory.weights + zero.memory.grads + zero.memory.optimizer, (6 + 12.0 / 8) * P,
              1);
}

TEST(TrainCost, BubbleIsPMinusOneOverMV) {
  const ModelSpec m = gpt();
  const ClusterSpec c = ideal(8);
  for (int v : {1, 2, 4}) {
    const TrainWorkload w{32, 1024};
    const TrainEstimate e = estimate_train(m, c, w, {1, 4, 2, 1, false, 1, v, Recompute::kNone, 0});
    const double busy = e.time.gemm + e.time.attention + e.time.elementwise + e.time.tp_comm;
    const double m_micro = 32.0 / 2;
    EXPECT_NEAR(e.time.bubble / busy, 3.0 / (m_micro * v), 1e-9) << "v " << v;
  }
}

TEST(TrainCost, TpTrafficIsEightBshTimesTMinusOneOverT) {
  const ModelSpec m = gpt();
  const ClusterSpec c = ideal(8);
  const double b = 1, s = 1024, h = 1024;
  for (int t : {2, 4, 8}) {
    const TrainWorkload w{8, 1024};
    const TrainEstimate e =
        estimate_train(m, c, w, {t, 1, 8 / t, 1, false, 1, 1, Recompute::kNone, 0});
    const double per_layer_elements = 8 * b * s * h * (t - 1.0) / t;  // per micro-batch
    const double expected_s =
        double(e.micro_batches) * m.layers * per_layer_elements * 2 / c.intra.bandwidth_Bps;
    EXPECT_NEAR(e.time.tp_comm / expected_s, 1.0, 1e-9) << "tp " << t;
  }
}

// With eff.tp_overlap the backward's two collectives (of the four, six with full recomputation)
// hide behind the weight-gradient GEMMs, which at these sizes take longer than they do.
TEST(TrainCost, TpOverlapHidesTheBackwardsTwoCollectives) {
  const ModelSpec m = gpt();
  for (Recompute r : {Recompute::kNone, Recompute::kFull}) {
    ClusterSpec c = ideal(8);
    const TrainWorkload w{8, 1024};
    const TrainPlan p{4, 1, 2, 1, false, 1, 1, r, 0};
    const TrainEstimate plain = estimate_train(m, c, w, p);
    c.eff.tp_overlap = true;
    const TrainEstimate overlapped = estimate_train(m, c, w, p);
    const double collectives = r == Recompute::kFull ? 6 : 4;
    EXPECT_NEAR(overlapped.time.tp_comm / plain.time.tp_comm, (collectives - 2) / collectives, 1e-9)
        << recompute_name(r);
    EXPECT_NEAR(plain.step_time_s - overlapped.step_time_s, plain.time.tp_comm - overlapped.time.tp_comm,
                1e-12);
    EXPECT_EQ(overlapped.time.gemm, plain.time.gemm);
  }
}

// Under SP the backward gathers the column-parallel layers' inputs again (2 all-gathers, half an
// all-reduce each): 5 all-reduces' worth a layer instead of 4. With tp_overlap the re-gathers and
// the input gradients' reduce-scatters hide behind GEMMs, but the gradients' all-gathers before the
// row-parallel layers' backward do not: 3 exposed against 2 without SP.
TEST(TrainCost, SequenceParallelGathersTheInputsAgainInTheBackward) {
  const ModelSpec m = gpt();
  ClusterSpec c = ideal(8);
  const TrainWorkload w{8, 1024};
  const TrainPlan plain{4, 1, 2, 1, false, 1, 1, Recompute::kSelective, 0};
  TrainPlan sp = plain;
  sp.sp = true;
  auto sp_over_plain = [&] {
    return estimate_train(m, c, w, sp).time.tp_comm / estimate_train(m, c, w, plain).time.tp_comm;
  };
  EXPECT_NEAR(sp_over_plain(), 5.0 / 4, 1e-9);
  c.eff.tp_overlap = true;
  EXPECT_NEAR(sp_over_plain(), 3.0 / 2, 1e-9);
}

// Four ranks time-slicing two cores: a pipeline of 4 stages takes the node's work over its cores,
// i.e. half of what one rank on one core takes for the whole model, plus the transfers; no bubble.
TEST(TrainCost, TimeSlicedPipelineIsTheNodesWorkOverItsCores) {
  const ModelSpec m = gpt();  // 16 layers: 4 stages of 4
  const TrainWorkload w{16, 1024};
  const TrainPlan whole_plan{1, 1, 1, 1, false, 1, 1, Recompute::kNone, 0};
  const TrainPlan staged{1, 4, 1, 1, false, 1, 1, Recompute::kNone, 0};
  ClusterSpec one = ideal(1), four = ideal(4);
  one.cores_per_node = 1;
  four.cores_per_node = 2;
  // One memory bus: the four ranks stream at half a core's rate each, the lone rank at its own.
  one.node_memory_Bps = four.node_memory_Bps = 2 * four.memory_Bps * four.eff.memory;
  const TrainEstimate whole = estimate_train(m, one, w, whole_plan);
  const TrainEstimate sliced = estimate_train(m, four, w, staged);
  ClusterSpec own = four;  // the same four devices, each on a core of its own
  own.cores_per_node = 0;
  own.node_memory_Bps = 0;
  const TrainEstimate unsliced = estimate_train(m, own, w, staged);
  auto pipeline = [](const TrainTime& t) {
    return t.gemm + t.attention + t.elementwise + t.tp_comm + t.ep_comm + t.pp_comm + t.bubble;
  };
  EXPECT_NEAR(pipeline(sliced.time) / (pipeline(whole.time) / 2 + unsliced.time.pp_comm), 1.0, 1e-9);
  EXPECT_EQ(sliced.time.bubble, 0);
  EXPECT_GT(unsliced.time.bubble, 0);
  // Each stage's memory: stage 0 holds 4 micro-batches in flight and the embedding, stage 3 one
  // and the head; the plan's figure is the fullest.
  ASSERT_EQ(sliced.stage_memory_bytes.size(), 4u);
  EXPECT_GT(sliced.stage_memory_bytes[0], sliced.stage_memory_bytes[1]);
  EXPECT_GT(sliced.stage_memory_bytes[1], sliced.stage_memory_bytes[2]);
  EXPECT_DOUBLE_EQ(sliced.memory.total(), *std::max_element(sliced.stage_memory_bytes.begin(),
                                                            sliced.stage_memory_bytes.end()));
}

// Three ranks on two cores: the busiest core holds two, so tp 3 (meeting every layer) runs at half
// a core, not at the two-thirds average share; dp 3 (meeting once a step) at the average.
TEST(TrainCost, UnevenlyTimeSlicedRanksMeetingOftenRunAtTheBusiestCoresPace) {
  ClusterSpec c = ideal(3);
  c.cores_per_node = 2;
  EXPECT_NEAR(lockstep_slowdown(c), 4.0 / 3, 1e-12);
  ClusterSpec even = c;
  even.devices_per_node = 4;
  EXPECT_EQ(lockstep_slowdown(even), 1);
  even.devices_per_node = 2;
  EXPECT_EQ(lockstep_slowdown(even), 1);
  const ModelSpec m = gpt();
  const TrainWorkload w{12, 1024};
  ClusterSpec own = c;  // each rank on a core of its own
  own.cores_per_node = 0;
  for (const TrainPlan& p : {TrainPlan{3, 1, 1, 1, false, 1, 1, Recompute::kNone, 0},
                             TrainPlan{1, 1, 3, 1, false, 1, 1, Recompute::kNone, 0}}) {
    const double ratio =
        estimate_train(m, c, w, p).time.attention / estimate_train(m, own, w, p).time.attention;
    EXPECT_NEAR(ratio, p.tp == 3 ? 2.0 : 1.5, 1e-9) << "tp " << p.tp << " dp " << p.dp;
  }
}

TEST(TrainCost, OrderingProperties) {
  const ModelSpec m = gpt();
  const ClusterSpec c = cluster_preset("dgx-a100-80g");
  const TrainWorkload w{64, 1024};
  const auto at = [&](int tp, Recompute r, bool sp) {
    return estimate_train(m, c, w, {tp, 1, 8 / tp, 1, sp, 1, 1, r, 0});
  };
  // More recomputation: less activation memory, more time.
  const auto none = at(2, Recompute::kNone, false), sel = at(2, Recompute::kSelective, false),
             full = at(2, Recompute::kFull, false);
  EXPECT_GT(none.memory.activations, sel.memory.activations);
  EXPECT_GT(sel.memory.activations, full.memory.activations);
  EXPECT_LT(none.step_time_s, sel.step_time_s);
  EXPECT_LT(sel.step_time_s, full.step_time_s);
  // Larger tp: less model state per device.
  EXPECT_GT(at(1, Recompute::kNone, false).memory.weights,
            at(2, Recompute::kNone, false).memory.weights);
  EXPECT_GT(at(2, Recompute::kNone, false).memory.weights,
            at(8, Recompute::kNone, false).memory.weights);
  // SP shards the replicated activations.
  EXPECT_GT(at(4, Recompute::kNone, false).memory.activations,
            at(4, Recompute::kNone, true).memory.activations);
  // Hardware FLOPs with full recomputation: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
  const double B = 64, S = 1024, l = 16, h = 1024, V = 51200;
  const double hw = 96 * B * S * l * h * h * (1 + S / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(full.hardware_flops_per_device * full.step_time_s * c.world() / hw, 1.0, 1e-9);
}

TEST(TrainCost, InvalidPlansNameTheProblem) {
  const ModelSpec m = gpt();
  const ClusterSpec c = ideal(8);
  const TrainWorkload w{64, 1024};
  EXPECT_NE(
      train_plan_problem(m, c, w, {3, 1, 2, 1, false, 1, 1, Recompute::kNone, 0}).find("devices"),
      std::string::npos);
  EXPECT_NE(train_plan_problem(m, c, {63, 1024}, {1, 1, 8, 1, false, 1, 1, Recompute::kNone, 0})
                .find("global batch"),
            std::string::npos);
  EXPECT_NE(train_plan_problem(m, c, w, {1, 1, 8, 1, true, 1, 1, Recompute::kNone, 0}).find("sp"),
            std::string::npos);
  EXPECT_NE(train_plan_problem(m, c, w, {1, 1, 8, 2, false, 1, 1, Recompute::kNone, 0}).find("MoE"),
            std::string::npos);
  EXPECT_NE(
      train_plan_problem(m, c, w, {1, 8, 1, 1, false, 1, 3, Recompute::kNone, 0}).find("divisible"),
      std::string::npos);
  EXPECT_THROW(estimate_train(m, c, w, {3, 1, 2, 1, false, 1, 1, Recompute::kNone, 0}),
               std::exception);
}

TEST(TrainCost, KvHeadsReplicatedBeyondTheirCount) {
  ModelSpec m = gpt();
  m.kv_heads = 2;  // GQA: 16 query heads, 2 KV heads
  // tp 8 > 2 KV heads: each rank still holds one whole KV head (head_dim wide K and V).
  const double s = 512, b = 1, hd = 64, h = 1024;
  const double act8 = layer_activation_bytes(m, b, s, 8, true, Recompute::kSelective, true);
  const double q = 2 * hd, kv = hd, f = 4 * h / 8;  // local widths: 2 query heads, 1 KV head
  // Norm/QKV/MLP inputs (2 bytes) and 2 dropout masks (1 byte), sharded by SP; Q, K, V and the
  // projection input; GELU's input and output.
  const double expected = s * b * ((4 * 2 + 2) * h / 8 + 2 * (q + kv) + 2 * kv + 2 * q + 2 * 2 * f);
  EXPECT_NEAR(act8, expected, 1);
}

}  // namespace
}  // namespace tensorpar::plan
