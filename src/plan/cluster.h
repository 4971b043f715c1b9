// ClusterSpec: the machines a plan runs on (devices, their compute and memory, the two link
// tiers) and the efficiencies the cost model applies. Read from a JSON file (format in
// docs/planner.md) or taken from a named preset.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace tensorpar::plan {

// One link tier, per device and direction: a collective among devices of this tier moves its
// bytes at bandwidth_Bps and pays latency_s per step (the alpha-beta model).
struct LinkSpec {
  double bandwidth_Bps = 0;  // bytes/s per device, one direction, all its links together
  double latency_s = 0;
  int links = 1;  // documentation: NVLinks per GPU, NICs per node
};

// How close to peak the software gets; calibrated (docs/planner.md says on what).
struct EfficiencySpec {
  double gemm_max = 0.8;         // fraction of peak FLOP/s a large GEMM reaches
  double gemm_half_flops = 1e9;  // GEMM size (FLOPs) at which it reaches half of gemm_max
  double memory = 0.8;           // fraction of memory bandwidth elementwise ops and decode reach
  double link = 0.8;             // fraction of link bandwidth a large collective reaches
  bool dp_overlap = false;       // DP gradient reduction overlaps the backward pass
  bool fused_attention = false;  // flash attention: no s x s scores in memory
  // The activations tensorpar's trainer keeps beyond the per-layer formula: each layer's fused
  // q/k/v output beside q, k and v; each micro-batch's stage output and (rows, h) gradients (and
  // the final norm's output on the last stage); under SP three gathered (s b, h) buffers a stage.
  bool tensorpar_buffers = false;
  // The backward's TP collectives of the input gradients overlap the weight-gradient GEMMs
  // (Megatron-LM since 2022, Korthikanti et al. section 6; the GPU presets). Off for Megatron 2021
  // (Narayanan et al.'s runs) and for a CPU calibration: tensorpar's trainer runs them on a comm
  // thread, but there the collectives are copies by the same cores, so nothing hides.
  bool tp_overlap = false;
  // Norms, residual adds, dropout and the activation function run as fused kernels (Megatron's),
  // not an op at a time (tensorpar's trainer): less memory traffic, docs/planner.md.
  bool fused_elementwise = false;
  // Training's attention kernels (FLOPs of the full T x T square): peak x attention_max x
  // s / (s + attention_half_seq) at sequence length s, fitted by --calibrate on `bench attention`.
  // 0: they run at the GEMM curve (the GPU presets).
  double attention_max = 0;
  double attention_half_seq = 0;
  // A decode step's work besides its weight stream, per layer, fitted by --calibrate on `bench
  // decode` of a small random model: decode_layer_s fixed seconds a layer (norms, RoPE, the
  // kernels' set-up, the thread team), and decode attention (one query row a head, 4 HS FLOPs a
  // head and context token) at decode_attention_flops FLOP/s. 0: neither (the GPU presets).
  double decode_layer_s = 0;
  double decode_attention_flops = 0;
};

struct ClusterSpec {
  std::string name;
  int nodes = 1;
  int devices_per_node = 1;
  // A CPU node: the cores its devices (ranks) share. More devices than cores time-slice them, so
  // each computes at cores / devices of its peak. 0: every device computes on its own (GPUs).
  int cores_per_node = 0;
  double memory_bytes = 0;    // per device
  double reserved_bytes = 0;  // per device: runtime, workspace, fragmentation
  double peak_flops = 0;      // dense 16-bit FLOP/s per device (f32 on a CPU calibration)
  double memory_Bps = 0;      // device memory bandwidth
  // Measured weight streaming of one decode matmul per weight format ("q4_1", "q8_0", "bf16",
  // ...), where it differs from memory_Bps x eff.memory: a CPU dequantizes blocks on the way in
  // (plan --calibrate fills it). Formats not listed stream at memory_Bps x eff.memory.
  std::map<std::string, double> weight_stream_Bps;
  // A node whose devices share one memory bus (the cores of a CPU): the bandwidth of all its
  // devices streaming at once, overall and per weight format (plan --calibrate measures both
  // with one thread per rank). Each device then streams at most 1/devices_per_node of it.
  // 0 / empty: every device has memory of its own (GPUs).
  double node_memory_Bps = 0;
  std::map<std::string, double> node_weight_stream_Bps;
  LinkSpec intra;             // inside a node (NVLink; shared memory on a CPU)
  LinkSpec inter;             // between nodes (InfiniBand), per device
  EfficiencySpec eff;

  int world() const { return nodes * devices_per_node; }
  void validate(const std::string& where) const;
};

ClusterSpec cluster_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json cluster_to_json(const ClusterSpec& c);
ClusterSpec read_cluster_file(const std::string& path);

// Presets: "dgx-a100-80g", "dgx-h100", "h200x8", "this-machine"; `nodes` > 0 overrides the node
// count. Throws listing the names for an unknown one.
ClusterSpec cluster_preset(const std::string& name, int nodes = 0);
std::vector<std::string> cluster_preset_names();
// A preset name or a JSON file path.
ClusterSpec resolve_cluster(const std::string& name_or_path, int nodes = 0);

}  // namespace tensorpar::plan
