// A cluster description of this machine from tensorpar's own benchmarks: `bench gemm --json`
// (GEMM FLOP/s by size) and `bench comm --json` (all-reduce time by size, memory bandwidth).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "plan/cluster.h"

namespace tensorpar::plan {

struct GemmSample {
  double flops = 0;  // 2 M N K
  double flops_per_s = 0;
  double weight_bytes = 0;  // N K x bytes per weight (f32: 4)
  bool streaming = false;   // M = 1: the bench rotates weight copies, so W comes from memory
};
struct CommSample {
  double bytes = 0;
  double seconds = 0;
  int ranks = 2;
};

// Parses the JSON lines the benches print (other lines are skipped); `dtype` picks the GEMM rows.
// A GEMM row's rate is its training rate (`train_gflops`: forward and both gradients) where the
// bench measured one, else its forward rate.
std::vector<GemmSample> parse_gemm_bench(const std::string& text, const std::string& dtype);
std::vector<CommSample> parse_comm_bench(const std::string& text, double* memory_Bps);
// `bench gemm --quant --json` rows at one row (M = 1, decode): per type ("q4_1", ...), the
// median over the shapes of the weight stream of the kernel inference uses by default.
std::map<std::string, double> parse_quant_stream_bench(const std::string& text);
// The fastest weight stream (bytes/s) of the one-row GEMMs among `gemm` (0 when none).
double fastest_weight_stream(const std::vector<GemmSample>& gemm);

// Peak = the fastest GEMM; gemm_max and gemm_half_flops fitted (least squares in log time) to
// the compute-bound samples (FLOPs per weight byte at least 4 x peak / bandwidth; all when fewer
// than two);
// memory bandwidth per device = the fastest weight stream of an M = 1 GEMM (what decode does;
// `memory_Bps` from the comm bench's memcpy, shared by the ranks, is the fallback); link latency
// from the smallest all-reduce, bandwidth from the largest (ring formula inverted).
struct AttentionSample {
  double seq = 0;
  double flops_per_s = 0;  // forward + backward, the full T x T square counted
};
// `bench attention --json` rows (their training rate).
std::vector<AttentionSample> parse_attention_bench(const std::string& text);

ClusterSpec calibrate_cluster(const std::vector<GemmSample>& gemm,
                              const std::vector<CommSample>& comm, double memory_Bps, int devices,
                              double memory_bytes);

// Sets c.eff.attention_max and attention_half_seq: least squares in log rate of
// peak x max x seq / (seq + half) against the samples (c.peak_flops already set). No samples:
// unchanged.
void fit_attention(ClusterSpec& c, const std::vector<AttentionSample>& samples);

struct DecodeSample {
  double layers = 0;
  double attention_flops = 0;  // a step's, all layers: 4 x heads x head size x mean context each
  double weight_bytes = 0;     // streamed a step (f32: at c.memory_Bps)
  double seconds = 0;          // a step
};
// `bench decode --json` rows of one row (R = 1).
std::vector<DecodeSample> parse_decode_bench(const std::string& text);
// Sets c.eff.decode_layer_s and decode_attention_flops: least squares of
// step - weights / memory_Bps = base + layers x decode_layer_s + attention_flops / rate over
// the samples, which must vary both the layer count and the context (c.memory_Bps already set).
// Throws on samples that do not determine the three, or on a fit that is not positive.
void fit_decode(ClusterSpec& c, const std::vector<DecodeSample>& samples);

}  // namespace tensorpar::plan
