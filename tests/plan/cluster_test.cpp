// Cluster files and presets: round trip, datasheet numbers, clear errors; the alpha-beta
// collectives against their formulas; this machine's calibration from synthetic bench output.
#include "plan/cluster.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "plan/calibrate.h"
#include "plan/comm_cost.h"
#include "plan/device_cost.h"

namespace tensorpar::plan {
namespace {

TEST(Cluster, PresetsCarryDatasheetNumbers) {
  const ClusterSpec a = cluster_preset("dgx-a100-80g");
  EXPECT_EQ(a.world(), 8);
  EXPECT_DOUBLE_EQ(a.peak_flops, 312e12);
  EXPECT_DOUBLE_EQ(a.intra.bandwidth_Bps, 12 * 25e9);  // NVLink 3: 12 links x 25 GB/s
  EXPECT_DOUBLE_EQ(a.inter.bandwidth_Bps, 200e9 / 8);  // HDR 200 Gb/s per GPU
  const ClusterSpec h = cluster_preset("dgx-h100", 4);
  EXPECT_EQ(h.world(), 32);
  EXPECT_DOUBLE_EQ(h.inter.bandwidth_Bps, 400e9 / 8);  // NDR 400 Gb/s per GPU
  EXPECT_NEAR(cluster_preset("h200x8").memory_bytes / std::pow(1024.0, 3), 141, 1e-9);
  for (const auto& n : cluster_preset_names()) {
    EXPECT_NO_THROW(cluster_preset(n));
  }
}

TEST(Cluster, JsonRoundTripAndErrors) {
  const ClusterSpec a = cluster_preset("dgx-h100", 3);
  const ClusterSpec b = cluster_from_json(cluster_to_json(a), "roundtrip");
  EXPECT_EQ(b.world(), a.world());
  EXPECT_DOUBLE_EQ(b.peak_flops, a.peak_flops);
  EXPECT_DOUBLE_EQ(b.inter.latency_s, a.inter.latency_s);
  EXPECT_EQ(b.eff.dp_overlap, a.eff.dp_overlap);
  nlohmann::json j = cluster_to_json(a);
  j["device"].erase("tflops");
  try {
    cluster_from_json(j, "my_cluster.json");
    FAIL() << "missing tflops accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("my_cluster.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("tflops"), std::string::npos);
  }
  try {
    cluster_preset("dgx-z9000");
    FAIL() << "unknown preset accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("dgx-a100-80g"), std::string::npos);
  }
  EXPECT_THROW(read_cluster_file("/nonexistent/cluster.json"), std::exception);
  const std::string deep = (std::filesystem::temp_directory_path() / "tp_deep_cluster.json").string();
  std::ofstream(deep) << "{\"device\": " << std::string(100000, '[') << std::string(100000, ']') << "}";
  try {
    read_cluster_file(deep);
    FAIL() << "deep JSON accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 128"), std::string::npos) << e.what();
  }
  std::filesystem::remove(deep);
}

TEST(Comm, AlphaBetaRing) {
  ClusterSpec c = cluster_preset("dgx-a100-80g", 2);
  c.eff.link = 1;
  const double N = 1 << 26;
  // Inside a node: 2 (n-1) alpha + 2 (n-1)/n N / B.
  EXPECT_NEAR(all_reduce_time(c, {8, 1}, N),
              14 * c.intra.latency_s + 2 * 7.0 / 8 * N / c.intra.bandwidth_Bps, 1e-15);
  // A DP group of stride 8 crosses nodes and runs at the NIC rate.
  EXPECT_NEAR(all_reduce_time(c, {2, 8}, N), 2 * c.inter.latency_s + N / c.inter.bandwidth_Bps,
              1e-15);
  EXPECT_NEAR(all_gather_time(c, {4, 1}, N),
              3 * c.intra.latency_s + 0.75 * N / c.intra.bandwidth_Bps, 1e-15);
  EXPECT_EQ(all_reduce_time(c, {1, 1}, N), 0);
  // TP 16 over two nodes of 8: in two levels, the network carrying an eighth of the bytes per GPU
  // (reduce-scatter and all-gather inside each node, an all-reduce of N / 8 between the nodes).
  const double inside = 7 * c.intra.latency_s + 7.0 / 8 * N / c.intra.bandwidth_Bps;
  EXPECT_NEAR(all_reduce_time(c, {16, 1}, N),
              2 * inside + 2 * c.inter.latency_s + (N / 8) / c.inter.bandwidth_Bps, 1e-12);
  EXPECT_NEAR(all_gather_time(c, {16, 1}, N),
              inside + c.inter.latency_s + 0.5 * (N / 8) / c.inter.bandwidth_Bps, 1e-12);
  // Two members per node (stride 4) on two nodes: L = 2, the network carrying N / 2.
  EXPECT_NEAR(all_reduce_time(c, {4, 4}, N),
              2 * (c.intra.latency_s + 0.5 * N / c.intra.bandwidth_Bps) + 2 * c.inter.latency_s +
                  (N / 2) / c.inter.bandwidth_Bps,
              1e-12);
  // Far cheaper than one ring over the NICs, dearer than inside a node.
  EXPECT_LT(all_reduce_time(c, {16, 1}, N), 30.0 / 16 * N / c.inter.bandwidth_Bps);
  EXPECT_GT(all_reduce_time(c, {16, 1}, N), all_reduce_time(c, {8, 1}, N));
}

TEST(Calibrate, RecoversTheGeneratingConstants) {
  // Synthetic bench output from known constants: peak 100 GFLOP/s with half-rate at 1e7 FLOPs,
  // all-reduce over 2 ranks with alpha 10 us and 4 GB/s.
  std::string gemm, comm;
  for (double f : {1e5, 1e6, 1e7, 1e8, 1e10}) {
    const double rate = 100e9 * f / (f + 1e7);
    gemm += "{\"bench\":\"gemm\",\"dtype\":\"f32\",\"m\":2,\"n\":1,\"k\":" + std::to_string(f / 4) +
            ",\"gflops\":" + std::to_string(rate * 1e-9) + "}\n";
  }
  for (double bytes : {8.0, 1024.0, 1048576.0, 16777216.0}) {
    const double t = 2 * 10e-6 + bytes / 4e9;
    comm += "{\"bench\":\"comm\",\"op\":\"all_reduce\",\"ranks\":2,\"bytes\":" +
            std::to_string(int64_t(bytes)) + ",\"time_us\":" + std::to_string(t * 1e6) +
            ",\"bmem_gbps\":20.0}\n";
  }
  double mem = 0;
  const auto comm_rows = parse_comm_bench("# header\n" + comm, &mem);
  const ClusterSpec c = calibrate_cluster(parse_gemm_bench(gemm, "f32"), comm_rows, mem, 2, 8e9);
  EXPECT_NEAR(c.peak_flops, 100e9 * 1e10 / (1e10 + 1e7), 1e3);
  EXPECT_NEAR(std::log10(c.eff.gemm_half_flops), 7.0, 0.03);
  EXPECT_NEAR(c.intra.latency_s, 10e-6, 0.1e-6);
  EXPECT_NEAR(c.intra.bandwidth_Bps, 4e9, 0.01e9);
  EXPECT_DOUBLE_EQ(c.memory_Bps, 10e9);  // 20 GB/s shared by 2 ranks (no M = 1 rows given)
  // An M = 1 row streaming its 4 N K weight bytes at 12 GB/s sets the bandwidth.
  const std::string stream =
      "{\"bench\":\"gemm\",\"dtype\":\"f32\",\"m\":1,\"n\":1000,\"k\":1000,\"gflops\":6.0}\n";
  const ClusterSpec s2 =
      calibrate_cluster(parse_gemm_bench(gemm + stream, "f32"), comm_rows, mem, 2, 8e9);
  EXPECT_NEAR(s2.memory_Bps, 4e6 / (2e6 / 6e9), 1);
  EXPECT_THROW(calibrate_cluster({}, comm_rows, mem, 2, 8e9), std::exception);
  // Compute-bound rows (512 rows: 256 FLOPs per weight byte) on the curve, beside few-row GEMMs
  // bound by their weight read (far below the curve at their size): the curve comes from the
  // compute-bound rows alone.
  std::string mixed;
  for (double f : {1e6, 1e7, 1e8, 1e10}) {
    const double rate = 100e9 * f / (f + 1e7), nk = f / (2 * 512);
    mixed += "{\"bench\":\"gemm\",\"dtype\":\"f32\",\"m\":512,\"n\":1,\"k\":" + std::to_string(nk) +
             ",\"gflops\":" + std::to_string(rate * 1e-9) + "}\n";
    const double nk16 = f / (2 * 16);  // 16 rows: 8 FLOPs per byte, read at 10 GB/s
    mixed += "{\"bench\":\"gemm\",\"dtype\":\"f32\",\"m\":16,\"n\":1,\"k\":" + std::to_string(nk16) +
             ",\"gflops\":" + std::to_string(f / (4 * nk16 / 10e9) * 1e-9) + "}\n";
  }
  const ClusterSpec s3 = calibrate_cluster(parse_gemm_bench(mixed, "f32"), comm_rows, mem, 2, 8e9);
  EXPECT_NEAR(std::log10(s3.eff.gemm_half_flops), 7.0, 0.03);
  // Training rates below the fastest row: the curve's maximum is fitted too. Six rows on a curve
  // reaching 0.8 of the fastest, which is one large GEMM at 100 GFLOP/s.
  std::string below = "{\"bench\":\"gemm\",\"dtype\":\"f32\",\"m\":512,\"n\":1,\"k\":" +
                      std::to_string(1e11 / 1024) + ",\"gflops\":100.0}\n";
  for (double f : {1e6, 3e6, 1e7, 1e8, 1e9, 1e10}) {
    const double rate = 80e9 * f / (f + 1e7);
    below += "{\"bench\":\"gemm\",\"dtype\":\"f32\",\"m\":512,\"n\":1,\"k\":" +
             std::to_string(f / 1024) + ",\"gflops\":" + std::to_string(rate * 1e-9) + "}\n";
  }
  const ClusterSpec s4 = calibrate_cluster(parse_gemm_bench(below, "f32"), comm_rows, mem, 2, 8e9);
  EXPECT_DOUBLE_EQ(s4.peak_flops, 100e9);
  // Least squares in log time: the six rows at 0.8 and the one at 1.0 give 0.85.
  EXPECT_GT(s4.eff.gemm_max, 0.79);
  EXPECT_LT(s4.eff.gemm_max, 0.90);
  EXPECT_NEAR(std::log10(s4.eff.gemm_half_flops), 7.0, 0.1);
  // A row that timed the backward GEMMs too counts at its training rate.
  const auto rows = parse_gemm_bench(
      "{\"bench\":\"gemm\",\"dtype\":\"f32\",\"m\":512,\"n\":64,\"k\":64,\"gflops\":200.0,"
      "\"train_gflops\":150.0}\n{\"bench\":\"gemm\",\"dtype\":\"f32\",\"m\":1,\"n\":64,\"k\":64,"
      "\"gflops\":5.0}\n",
      "f32");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(rows[0].flops_per_s, 150e9);
  EXPECT_DOUBLE_EQ(rows[1].flops_per_s, 5e9);
}

TEST(Calibrate, AttentionCurveFromTheBenchRows) {
  // `bench attention --json` rows generated at 0.6 of a 100 GFLOP/s peak, half rate at T = 50.
  std::string text = "causal GQA attention ...\n";
  for (double T : {128.0, 256.0, 512.0, 2048.0})
    text += "{\"bench\":\"attention\",\"seq\":" + std::to_string(int(T)) +
            ",\"forward_gflops\":1.0,\"train_gflops\":" + std::to_string(60 * T / (T + 50)) + "}\n";
  const auto rows = parse_attention_bench(text);
  ASSERT_EQ(rows.size(), 4u);
  ClusterSpec c = cluster_preset("this-machine");
  c.peak_flops = 100e9;
  c.devices_per_node = 1;
  EXPECT_EQ(c.eff.attention_max, 0);
  const double as_gemm = attention_time(c, 1e9, 128);
  EXPECT_DOUBLE_EQ(as_gemm, gemm_time(c, 1e9));  // uncalibrated: the GEMM curve
  fit_attention(c, rows);
  EXPECT_NEAR(c.eff.attention_max, 0.6, 0.006);
  EXPECT_NEAR(c.eff.attention_half_seq, 50, 2.5);
  // 1 GFLOP at T = 128 and at T = 2048: the rows' own rates.
  EXPECT_NEAR(attention_time(c, 1e9, 128), 1.0 / (60 * 128 / 178.0), 0.01 / (60 * 128 / 178.0));
  EXPECT_NEAR(attention_time(c, 1e9, 2048), 1.0 / (60 * 2048 / 2098.0), 0.01 / 58.0);
  const ClusterSpec back = cluster_from_json(cluster_to_json(c), "round trip");
  EXPECT_DOUBLE_EQ(back.eff.attention_max, c.eff.attention_max);
  EXPECT_DOUBLE_EQ(back.eff.attention_half_seq, c.eff.attention_half_seq);
  nlohmann::json bad = cluster_to_json(c);
  bad["efficiency"]["attention_max"] = 1.5;
  EXPECT_THROW(cluster_from_json(bad, "bad.json"), std::exception);
  ClusterSpec none = c;
  fit_attention(none, {});
  EXPECT_EQ(none.eff.attention_max, c.eff.attention_max);
}

TEST(Calibrate, DecodeTermsFromTheBenchRows) {
  // `bench decode --json` rows made by a machine that spends 20 us a layer, runs decode attention
  // at 8 GFLOP/s, 50 us a step besides the layers and streams f32 weights at 10 GB/s.
  const double layer_s = 20e-6, rate = 8e9, base_s = 50e-6, bw = 10e9;
  std::string text = "decode: ...\n";
  for (auto [layers, context] : {std::pair{4, 56.0}, {12, 56.0}, {12, 536.0}, {8, 300.0}}) {
    const double weights = 115e3 * layers, flops = layers * 4.0 * 1 * 64 * context;
    const double ms = 1e3 * (base_s + layers * layer_s + flops / rate + weights / bw);
    text += "{\"bench\":\"decode\",\"rows\":1,\"tp\":1,\"layers\":" + std::to_string(layers) +
            ",\"heads\":1,\"head_dim\":64,\"mean_context\":" + std::to_string(context) +
            ",\"weight_bytes_per_rank\":" + std::to_string(weights) +
            ",\"ms_per_step\":" + std::to_string(ms) + "}\n";
    // Rows of more than one sequence are not the one-row decode the fit is about.
    text += "{\"bench\":\"decode\",\"rows\":4,\"layers\":2,\"ms_per_step\":9.0}\n";
  }
  const auto rows = parse_decode_bench(text);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_DOUBLE_EQ(rows[2].attention_flops, 12 * 4.0 * 64 * 536);
  ClusterSpec c = cluster_preset("this-machine");
  c.memory_Bps = bw;
  fit_decode(c, rows);
  EXPECT_NEAR(c.eff.decode_layer_s, layer_s, 1e-3 * layer_s);  // ms_per_step has 6 decimals
  EXPECT_NEAR(c.eff.decode_attention_flops, rate, 1e-3 * rate);
  const ClusterSpec back = cluster_from_json(cluster_to_json(c), "round trip");
  EXPECT_NEAR(back.eff.decode_layer_s, c.eff.decode_layer_s, 1e-15);
  EXPECT_NEAR(back.eff.decode_attention_flops, c.eff.decode_attention_flops, 1e-3);
  nlohmann::json bad = cluster_to_json(c);
  bad["efficiency"]["decode_layer_us"] = -1;
  EXPECT_THROW(cluster_from_json(bad, "bad.json"), std::exception);
  // One context only: the layer and attention terms cannot be told apart.
  std::vector<DecodeSample> one_context = {rows[0], rows[1]};
  EXPECT_THROW(fit_decode(c, one_context), std::exception);
  EXPECT_THROW(fit_decode(c, {}), std::exception);
  // A machine whose longer context ran faster (noise): no negative rate.
  std::vector<DecodeSample> noisy = {rows[0], rows[1], rows[2]};
  noisy[2].seconds = noisy[1].seconds * 0.9;
  EXPECT_THROW(fit_decode(c, noisy), std::exception);
}

TEST(Calibrate, QuantizedWeightStreamsArePerTypeMediansAtOneRow) {
  // Rows of `bench gemm --quant --json`: M = 1 rows count (median over the shapes), M > 1 do not.
  const std::string text =
      "inference GGUF weights ...\n"
      "{\"bench\":\"gemm_quant\",\"type\":\"q4_1\",\"m\":1,\"n\":8,\"k\":32,\"default_weight_gbps\":9.0}\n"
      "{\"bench\":\"gemm_quant\",\"type\":\"q4_1\",\"m\":1,\"n\":8,\"k\":64,\"default_weight_gbps\":11.0}\n"
      "{\"bench\":\"gemm_quant\",\"type\":\"q4_1\",\"m\":1,\"n\":8,\"k\":96,\"default_weight_gbps\":10.0}\n"
      "{\"bench\":\"gemm_quant\",\"type\":\"q4_1\",\"m\":16,\"n\":8,\"k\":32,\"default_weight_gbps\":99.0}\n"
      "{\"bench\":\"gemm_quant\",\"type\":\"q8_0\",\"m\":1,\"n\":8,\"k\":32,\"default_weight_gbps\":12.0}\n"
      "{\"bench\":\"gemm_quant\",\"type\":\"q8_0\",\"m\":1,\"n\":8,\"k\":64,\"default_weight_gbps\":14.0}\n";
  const auto rates = parse_quant_stream_bench(text);
  ASSERT_EQ(rates.size(), 2u);
  EXPECT_DOUBLE_EQ(rates.at("q4_1"), 10e9);
  EXPECT_DOUBLE_EQ(rates.at("q8_0"), 13e9);
  // A cluster carrying them streams those formats at their rate and the others at memory_Bps.
  ClusterSpec c = cluster_preset("this-machine");
  c.weight_stream_Bps = rates;
  EXPECT_DOUBLE_EQ(weight_stream_time(c, 1e9, "q4_1"), 0.1);
  EXPECT_DOUBLE_EQ(weight_stream_time(c, 1e9, "bf16"), memory_time(c, 1e9));
  // A shared memory bus: two devices streaming at once get 1.5x one device's bandwidth between
  // them, so each streams at 0.75x; a format's node rate caps its own rate the same way.
  ASSERT_EQ(c.devices_per_node, 2);
  const double own = memory_time(c, 1e9);
  c.node_memory_Bps = 1.5 * c.memory_Bps * c.eff.memory;
  EXPECT_NEAR(memory_time(c, 1e9), own / 0.75, 1e-12);
  c.node_weight_stream_Bps["q4_1"] = 16e9;  // 8 GB/s each: below its own 10
  EXPECT_DOUBLE_EQ(weight_stream_time(c, 1e9, "q4_1"), 1e9 / 8e9);
  c.node_weight_stream_Bps["q8_0"] = 40e9;  // 20 each: its own 13 is the bound
  EXPECT_DOUBLE_EQ(weight_stream_time(c, 1e9, "q8_0"), 1e9 / 13e9);
  const ClusterSpec back = cluster_from_json(cluster_to_json(c), "round trip");
  EXPECT_EQ(back.weight_stream_Bps, c.weight_stream_Bps);
  EXPECT_EQ(back.node_weight_stream_Bps, c.node_weight_stream_Bps);
  EXPECT_NEAR(back.node_memory_Bps, c.node_memory_Bps, 1);
  nlohmann::json bad = cluster_to_json(c);
  bad["device"]["weight_stream_gbps"]["q4_0"] = -1;
  EXPECT_THROW(cluster_from_json(bad, "bad.json"), std::exception);
}

}  // namespace
}  // namespace tensorpar::plan
