// Fits the this-machine cluster: one device per rank, both link tiers the shared-memory
// collectives of the threads backend.
#include "plan/calibrate.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "plan/device_cost.h"

namespace tensorpar::plan {

namespace {
template <typename F>
void for_json_lines(const std::string& text, F&& f) {
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) f(j);
  }
}
}  // namespace

std::vector<GemmSample> parse_gemm_bench(const std::string& text, const std::string& dtype) {
  std::vector<GemmSample> out;
  for_json_lines(text, [&](const nlohmann::json& j) {
    if (j.value("bench", "") != "gemm" || j.value("dtype", "") != dtype) return;
    const double m = j.value("m", 0.0), nk = j.value("n", 0.0) * j.value("k", 0.0);
    // A row that also timed the backward GEMMs gives the training rate (forward and both
    // gradients), what the training model's GEMM time stands for.
    const double gflops = j.value("train_gflops", j.value("gflops", 0.0));
    out.push_back({2.0 * m * nk, gflops * 1e9, 4.0 * nk, m == 1});
  });
  return out;
}

std::vector<AttentionSample> parse_attention_bench(const std::string& text) {
  std::vector<AttentionSample> out;
  for_json_lines(text, [&](const nlohmann::json& j) {
    if (j.value("bench", "") != "attention") return;
    out.push_back({j.value("seq", 0.0), j.value("train_gflops", 0.0) * 1e9});
  });
  return out;
}

std::vector<CommSample> parse_comm_bench(const std::string& text, double* memory_Bps) {
  std::vector<CommSample> out;
  for_json_lines(text, [&](const nlohmann::json& j) {
    if (j.value("bench", "") != "comm" || j.value("op", "") != "all_reduce") return;
    out.push_back({j.value("bytes", 0.0), j.value("time_us", 0.0) * 1e-6, j.value("ranks", 2)});
    if (memory_Bps) *memory_Bps = j.value("bmem_gbps", 0.0) * 1e9;
  });
  return out;
}

std::map<std::string, double> parse_quant_stream_bench(const std::string& text) {
  std::map<std::string, std::vector<double>> rates;
  for_json_lines(text, [&](const nlohmann::json& j) {
    if (j.value("bench", "") != "gemm_quant" || j.value("m", 0) != 1) return;
    const double gbps = j.value("default_weight_gbps", 0.0);
    if (gbps > 0) rates[j.value("type", "")].push_back(gbps * 1e9);
  });
  std::map<std::string, double> out;
  for (auto& [type, r] : rates) {
    std::sort(r.begin(), r.end());
    out[type] = r.size() % 2 ? r[r.size() / 2] : 0.5 * (r[r.size() / 2 - 1] + r[r.size() / 2]);
  }
  return out;
}

double fastest_weight_stream(const std::vector<GemmSample>& gemm) {
  double best = 0;
  for (const auto& g : gemm)
    if (g.streaming && g.flops > 0) best = std::max(best, g.weight_bytes * g.flops_per_s / g.flops);
  return best;
}

ClusterSpec calibrate_cluster(const std::vector<GemmSample>& gemm,
                              const std::vector<CommSample>& comm, double memory_Bps, int devices,
                              double memory_bytes) {
  TP_CHECK(!gemm.empty(), "[plan --calibrate] no GEMM rows in the bench output");
  TP_CHECK(comm.size() >= 2, "[plan --calibrate] need at least two all-reduce sizes, got ",
           comm.size());
  TP_CHECK(memory_Bps > 0, "[plan --calibrate] the comm bench reported no memory bandwidth");
  ClusterSpec c;
  c.name = "this-machine";
  c.devices_per_node = devices;
  c.memory_bytes = memory_bytes;
  c.reserved_bytes = 0;  // the caller measures the process's fixed memory (plan --calibrate)
  c.memory_Bps = std::max(memory_Bps / devices, fastest_weight_stream(gemm));  // the memcpy: a fallback
  c.eff = {1.0, 1e7, 1.0, 1.0, false, true, true};  // tensorpar runs here
  for (const auto& g : gemm) c.peak_flops = std::max(c.peak_flops, g.flops_per_s);
  // The efficiency curve describes compute-bound GEMMs (training's, prefill's): samples whose
  // FLOPs per weight byte reach 4x the machine's balance (peak / bandwidth), so that their weight
  // read is at most a quarter of their compute. Nearer the balance (decode's few rows: 16 rows of
  // f32 are 8 FLOPs a byte) the weight read bounds the time, which memory_Bps models; fitting
  // those rows here would make every small GEMM look slow (a micro-batch of 2 x 128 tokens runs at
  // the rate of 8 x 128 on a CPU). All samples when fewer than two are compute-bound.
  std::vector<GemmSample> fit;
  for (const auto& g : gemm)
    if (!g.streaming && g.weight_bytes > 0 &&
        g.flops / g.weight_bytes >= 4 * c.peak_flops / c.memory_Bps)
      fit.push_back(g);
  if (fit.size() < 2) fit = gemm;
  // gemm_max and gemm_half_flops: least squares of log(predicted / measured time) over a grid
  // (the rates are training rates, forward and both gradients, which stay below the fastest).
  double best = 1e300;
  for (double gmax = 0.30; gmax <= 1.0001; gmax += 0.01) {
    for (double lg = 3; lg <= 11; lg += 0.02) {
      EfficiencySpec e = c.eff;
      e.gemm_max = std::min(1.0, gmax);
      e.gemm_half_flops = std::pow(10.0, lg);
      double err = 0;
      for (const auto& g : fit) {
        const double pred = c.peak_flops * gemm_efficiency(e, g.flops);
        err += std::pow(std::log(pred / g.flops_per_s), 2);
      }
      if (err < best) best = err, c.eff.gemm_max = e.gemm_max, c.eff.gemm_half_flops = e.gemm_half_flops;
    }
  }
  // All-reduce over n ranks: 2 (n-1) alpha + 2 (n-1)/n bytes / bw.
  const auto [lo, hi] = std::minmax_element(
      comm.begin(), comm.end(),
      [](const CommSample& a, const CommSample& b) { return a.bytes < b.bytes; });
  const double n = std::max(2, hi->ranks);
  const double alpha = lo->seconds / (2 * (n - 1));
  const double bw =
      2 * (n - 1) / n * hi->bytes / std::max(hi->seconds - 2 * (n - 1) * alpha, 1e-12);
  c.intra = {bw, alpha, 1};
  c.inter = c.intra;
  c.validate("plan --calibrate");
  return c;
}

void fit_attention(ClusterSpec& c, const std::vector<AttentionSample>& samples) {
  if (samples.empty()) return;
  TP_CHECK(c.peak_flops > 0, "[plan --calibrate] fit_attention needs the peak first");
  double best = 1e300;
  for (double amax = 0.02; amax <= 1.0001; amax += 0.01) {
    for (double lh = 0; lh <= 4; lh += 0.02) {  // half-rate sequence 1 .. 10^4
      const double half = std::pow(10.0, lh);
      double err = 0;
      for (const auto& a : samples) {
        const double pred = c.peak_flops * std::min(1.0, amax) * a.seq / (a.seq + half);
        err += std::pow(std::log(pred / a.flops_per_s), 2);
      }
      if (err < best) {
        best = err;
        c.eff.attention_max = std::min(1.0, amax);
        c.eff.attention_half_seq = half;
      }
    }
  }
}

std::vector<DecodeSample> parse_decode_bench(const std::string& text) {
  std::vector<DecodeSample> out;
  for_json_lines(text, [&](const nlohmann::json& j) {
    if (j.value("bench", "") != "decode" || j.value("rows", 0) != 1) return;
    const double layers = j.value("layers", 0.0);
    const double per_layer = 4 * j.value("heads", 0.0) / j.value("tp", 1.0) *
                             j.value("head_dim", 0.0) * j.value("mean_context", 0.0);
    out.push_back({layers, layers * per_layer, j.value("weight_bytes_per_rank", 0.0),
                   j.value("ms_per_step", 0.0) * 1e-3});
  });
  return out;
}

void fit_decode(ClusterSpec& c, const std::vector<DecodeSample>& samples) {
  TP_CHECK(c.memory_Bps > 0, "[plan --calibrate] fit_decode needs the memory bandwidth first");
  TP_CHECK(samples.size() >= 3, "[plan --calibrate] need at least 3 one-row bench decode rows, got ",
           samples.size());
  // Normal equations of y = x0 + x1 layers + x2 attention MFLOPs (x2 = 1e6 / rate).
  double a[3][4] = {};
  for (const DecodeSample& s : samples) {
    const double row[3] = {1, s.layers, s.attention_flops * 1e-6};
    const double y = s.seconds - s.weight_bytes / c.memory_Bps;
    for (int i = 0; i < 3; ++i) {
      for (int k = 0; k < 3; ++k) a[i][k] += row[i] * row[k];
      a[i][3] += row[i] * y;
    }
  }
  const double scale[3] = {a[0][0], a[1][1], a[2][2]};
  for (int col = 0; col < 3; ++col) {  // Gauss-Jordan; the matrix is symmetric positive semidefinite
    TP_CHECK(a[col][col] > 1e-9 * scale[col], "[plan --calibrate] ",
             samples.size(),
             " decode samples do not vary both the layer count and the context: cannot fit");
    for (int r = 0; r < 3; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (int k = col; k < 4; ++k) a[r][k] -= f * a[col][k];
    }
  }
  const double per_layer = a[1][3] / a[1][1], per_flop = a[2][3] / a[2][2] * 1e-6;
  TP_CHECK(per_layer > 0 && per_flop > 0, "[plan --calibrate] decode fit not positive: ",
           per_layer * 1e6, " us a layer, ", per_flop > 0 ? 1e-9 / per_flop : 0.0,
           " GFLOP/s attention (a busy machine? run it again)");
  c.eff.decode_layer_s = per_layer;
  c.eff.decode_attention_flops = 1 / per_flop;
}

}  // namespace tensorpar::plan
