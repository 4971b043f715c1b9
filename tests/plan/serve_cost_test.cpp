// The serving model: KV cache bytes against the closed form 2 L NKV HS bytes per token, the
// concurrency memory allows, latency orderings, and the SLO search.
#include "plan/serve_cost.h"

#include <gtest/gtest.h>

#include <cmath>

#include "plan/search.h"

namespace tensorpar::plan {
namespace {

ModelSpec llama_70b() {
  ModelSpec m;
  m.name = "llama-70b";
  m.layers = 80, m.hidden = 8192, m.heads = 64, m.kv_heads = 8, m.head_dim = 128;
  m.ffn = 28672, m.vocab = 128256;
  return m;
}

TEST(ServeCost, KvCacheAndConcurrencyFromClosedForm) {
  const ModelSpec m = llama_70b();
  const ClusterSpec c = cluster_preset("h200x8");
  ServeWorkload w;
  w.prompt_tokens = 1000, w.output_tokens = 24;
  for (int tp : {1, 2, 4, 8}) {
    const ServeEstimate e = estimate_serve(m, c, w, {tp, 1, 8 / tp});
    const double kv_token = 2.0 * 80 * (8.0 / tp) * 128 * 2;  // K and V, bf16
    EXPECT_NEAR(e.kv_bytes_per_seq, kv_token * 1024, 1) << tp;
    const double weights = double(total_parameters(m)) * 2 / tp;
    const double free_b = c.memory_bytes - c.reserved_bytes - weights;
    EXPECT_EQ(e.max_concurrency, free_b > 0 ? int64_t(std::floor(free_b / (kv_token * 1024))) : 0);
    EXPECT_EQ(e.fits, e.max_concurrency >= 1);
  }
  // tp 16 > 8 KV heads: each rank keeps one whole KV head.
  const ClusterSpec two = cluster_preset("h200x8", 2);
  const ServeEstimate e16 = estimate_serve(m, two, w, {16, 1, 1});
  EXPECT_NEAR(e16.kv_bytes_per_seq, 2.0 * 80 * 128 * 2 * 1024, 1);
}

TEST(ServeCost, DecodeStreamsWeightsAtTheirFormatsMeasuredRate) {
  // A cluster that streams q4_1 weights at half its memory bandwidth: the weight term of one
  // sequence's decode doubles, and the other terms stay.
  const ModelSpec m = llama_70b();
  ClusterSpec c = cluster_preset("h200x8");
  ServeWorkload w;
  w.weight_bytes = 0.5625, w.concurrency = 1;
  const ServeEstimate plain = estimate_serve(m, c, w, {8, 1, 1});
  w.weight_format_shares = {{"q4_1", 1.0}};
  c.weight_stream_Bps["q4_1"] = c.memory_Bps * c.eff.memory / 2;
  const ServeEstimate slow = estimate_serve(m, c, w, {8, 1, 1});
  EXPECT_NEAR(slow.decode_weights_s, 2 * plain.decode_weights_s, 1e-12);
  EXPECT_DOUBLE_EQ(slow.decode_kv_s, plain.decode_kv_s);
  EXPECT_DOUBLE_EQ(slow.decode_comm_s, plain.decode_comm_s);
  EXPECT_GT(slow.itl_s, plain.itl_s);
}

TEST(ServeCost, MixedFormatsStreamEachAtItsOwnRate) {
  // A file whose bytes are 70% q5_0 (streamed at a quarter of the memory bandwidth) and 30% q8_0
  // (at half): the weight term is the sum of the two shares' times, not all at q5_0's rate.
  const ModelSpec m = llama_70b();
  ClusterSpec c = cluster_preset("h200x8");
  const double bw = c.memory_Bps * c.eff.memory;
  c.weight_stream_Bps["q5_0"] = bw / 4;
  c.weight_stream_Bps["q8_0"] = bw / 2;
  ServeWorkload w;
  w.weight_bytes = 0.8, w.concurrency = 1, w.weight_format_shares = {{"q5_0", 1.0}};
  const ServeEstimate majority = estimate_serve(m, c, w, {8, 1, 1});
  w.weight_format_shares = {{"q5_0", 0.7}, {"q8_0", 0.3}};
  const ServeEstimate mixed = estimate_serve(m, c, w, {8, 1, 1});
  const double bytes = double(total_parameters(m)) * 0.8 / 8;
  EXPECT_NEAR(majority.decode_weights_s, bytes * 4 / bw, 1e-9);
  EXPECT_NEAR(mixed.decode_weights_s, 0.7 * bytes * 4 / bw + 0.3 * bytes * 2 / bw, 1e-9);
  EXPECT_DOUBLE_EQ(mixed.decode_kv_s, majority.decode_kv_s);
  EXPECT_LT(mixed.itl_s, majority.itl_s);
}

TEST(ServeCost, CalibratedDecodeAddsAttentionAndATimeALayer) {
  // A CPU calibration's decode terms: L layers x decode_layer_s and the attention's FLOPs at
  // decode_attention_flops, after the weight stream; the other terms as without them.
  const ModelSpec m = llama_70b();
  ClusterSpec c = cluster_preset("h200x8");
  ServeWorkload w;
  w.concurrency = 1;
  const ServeEstimate plain = estimate_serve(m, c, w, {8, 1, 1});
  EXPECT_EQ(plain.decode_other_s, 0);
  c.eff.decode_layer_s = 30e-6, c.eff.decode_attention_flops = 5e9;
  const ServeEstimate e = estimate_serve(m, c, w, {8, 1, 1});
  const double context = 512 + 256 / 2.0, q_local = 64 / 8 * 128;
  const double expected = 80 * 30e-6 + 4 * context * q_local * 80 / 5e9;
  EXPECT_NEAR(e.decode_other_s, expected, 1e-9);
  EXPECT_DOUBLE_EQ(e.decode_weights_s, plain.decode_weights_s);
  EXPECT_DOUBLE_EQ(e.decode_comm_s, plain.decode_comm_s);
  EXPECT_NEAR(e.itl_s, plain.itl_s + expected, 1e-9);  // weight-bound either way
}

TEST(ServeCost, LatencyOrderings) {
  const ModelSpec m = llama_70b();
  const ClusterSpec c = cluster_preset("dgx-h100");
  ServeWorkload w;
  const ServePlan p{8, 1, 1};
  // Decode is bandwidth-bound: one step at batch 1 streams the weights, plus 2 L latency-bound
  // all-reduces (2 (n-1) alpha each) that no batch size amortises.
  const double itl1 = decode_step_time(m, c, w, p, 1, 768);
  const double weights_s = double(total_parameters(m)) * 2 / 8 / (c.memory_Bps * c.eff.memory);
  const double latency_s = 2 * 80 * 2 * 7 * c.intra.latency_s;
  EXPECT_GT(itl1, weights_s + latency_s);
  EXPECT_LT(itl1, 1.1 * (weights_s + latency_s));
  // ITL grows with concurrency and context.
  EXPECT_LT(itl1, decode_step_time(m, c, w, p, 64, 768));
  EXPECT_LT(decode_step_time(m, c, w, p, 64, 768), decode_step_time(m, c, w, p, 64, 4096));
  // More tp: lower TTFT and ITL for one sequence.
  EXPECT_GT(estimate_serve(m, c, w, {4, 1, 2}).ttft_s, estimate_serve(m, c, w, {8, 1, 1}).ttft_s);
  // An ITL target lowers the concurrency chosen, and the chosen one meets it.
  ServeWorkload slo = w;
  slo.slo_itl_s =
      0.5 * decode_step_time(m, c, w, p, double(estimate_serve(m, c, w, p).max_concurrency), 768);
  const ServeEstimate e = estimate_serve(m, c, slo, p);
  EXPECT_LE(e.itl_s, slo.slo_itl_s);
  EXPECT_LT(e.concurrency, estimate_serve(m, c, w, p).concurrency);
}

TEST(ServeCost, SearchPutsPlansMeetingTheSloFirst) {
  const ModelSpec m = llama_70b();
  const ClusterSpec c = cluster_preset("dgx-h100");
  ServeWorkload w;
  w.slo_ttft_s = 0.5, w.slo_itl_s = 0.05;
  const auto plans = search_serve(m, c, w, {});
  ASSERT_FALSE(plans.empty());
  bool missed = false;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (!plans[i].meets_slo)
      missed = true;
    else {
      EXPECT_FALSE(missed);
    }
    if (i > 0 && plans[i].meets_slo) {
      EXPECT_GE(plans[i - 1].tokens_per_s, plans[i].tokens_per_s);
    }
  }
  EXPECT_TRUE(plans[0].meets_slo);
  // 70B in bf16 (140 GB) cannot fit one 80 GB H100.
  for (const auto& e : plans)
    if (e.plan.tp * e.plan.pp == 1) {
      EXPECT_FALSE(e.fits);
    }
}

}  // namespace
}  // namespace tensorpar::plan
