// Cluster presets and the JSON cluster format. Datasheet figures are dense (no sparsity) bf16
// FLOP/s, HBM bandwidth and per-GPU NVLink / NIC bandwidth, one direction.
#include "plan/cluster.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"

namespace tensorpar::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Megatron-LM (2022) on A100s: gemm_max fitted on one layer's five timings in Korthikanti et al.
// 2022 Table 4, the backward's TP collectives overlapped as that software does (docs/planner.md);
// the H100/H200 presets reuse the fraction-of-peak figures.
EfficiencySpec megatron_a100_efficiency() {
  EfficiencySpec e;
  e.gemm_max = 0.67;
  e.gemm_half_flops = 1e9;  // a prior (1024^3 GEMMs at 2/3 of the large-GEMM rate), not fitted
  e.memory = 0.8;
  e.link = 0.8;
  e.dp_overlap = true;
  e.tp_overlap = true;
  e.fused_elementwise = true;
  return e;
}

ClusterSpec dgx(const std::string& name, double mem_gib, double tflops, double hbm_GBps,
                double nvlink_GBps, int nvlinks, double nic_GBps) {
  ClusterSpec c;
  c.name = name;
  c.devices_per_node = 8;
  c.memory_bytes = mem_gib * kGiB;
  c.reserved_bytes = 2.0 * kGiB;
  c.peak_flops = tflops * 1e12;
  c.memory_Bps = hbm_GBps * 1e9;
  c.intra = {nvlink_GBps * 1e9, 3e-6, nvlinks};
  c.inter = {nic_GBps * 1e9, 6e-6, 8};
  c.eff = megatron_a100_efficiency();
  return c;
}

// This machine, measured with `tensorpar plan --calibrate FILE --devices 2` (docs/planner.md,
// "Closure"): 2 cores, f32 GEMM through oneDNN, the threads backend's shared-memory collectives.
ClusterSpec this_machine() {
  ClusterSpec c;
  c.name = "this-machine";
  c.devices_per_node = 2;  // ranks (one core each)
  c.cores_per_node = 2;
  c.memory_bytes = 8.0 * kGiB;
  c.reserved_bytes = 0.25 * kGiB;
  c.peak_flops = 128.1e9;          // fastest f32 GEMM, 1 thread
  c.memory_Bps = 7.32e9;           // fastest M = 1 weight stream
  c.intra = {4.28e9, 0.52e-6, 1};  // threads-backend all-reduce, 2 ranks
  c.inter = c.intra;
  c.eff = {1.0, 0.2e9, 1.0, 1.0, false, true, true};
  return c;
}

double num(const nlohmann::json& j, const char* key, const std::string& where) {
  TP_CHECK(j.contains(key) && j.at(key).is_number(), "[", where, "] missing number \"", key, "\"");
  return j.at(key).get<double>();
}

LinkSpec link_from_json(const nlohmann::json& j, const std::string& where) {
  LinkSpec l;
  l.bandwidth_Bps = num(j, "bandwidth_gbps", where) * 1e9;
  l.latency_s = num(j, "latency_us", where) * 1e-6;
  l.links = j.value("links", 1);
  return l;
}

// {"FORMAT": GB/s, ...} under `key` of the device object (absent: empty).
std::map<std::string, double> stream_rates(const nlohmann::json& d, const char* key, const std::string& where) {
  std::map<std::string, double> out;
  if (!d.contains(key)) return out;
  const auto& ws = d.at(key);
  TP_CHECK(ws.is_object(), "[", where, "] device: \"", key, "\" must be an object {\"FORMAT\": GB/s, ...}");
  for (const auto& [format, v] : ws.items()) {
    TP_CHECK(v.is_number() && v.get<double>() > 0, "[", where, "] device: ", key, ".", format,
             " must be a positive number");
    out[format] = v.get<double>() * 1e9;
  }
  return out;
}

nlohmann::json rates_to_json(const std::map<std::string, double>& rates) {
  nlohmann::json ws = nlohmann::json::object();
  for (const auto& [format, bps] : rates) ws[format] = bps * 1e-9;
  return ws;
}

nlohmann::json link_to_json(const LinkSpec& l) {
  return {{"bandwidth_gbps", l.bandwidth_Bps * 1e-9},
          {"latency_us", l.latency_s * 1e6},
          {"links", l.links}};
}

}  // namespace

void ClusterSpec::validate(const std::string& where) const {
  TP_CHECK(nodes >= 1 && devices_per_node >= 1, "[", where, "] nodes ", nodes,
           " and devices_per_node ", devices_per_node, " must be >= 1");
  TP_CHECK(cores_per_node >= 0, "[", where, "] cores_per_node ", cores_per_node, " must be >= 0");
  TP_CHECK(memory_bytes > 0 && peak_flops > 0 && memory_Bps > 0, "[", where,
           "] memory, FLOP/s and memory bandwidth must be positive");
  TP_CHECK(intra.bandwidth_Bps > 0 && inter.bandwidth_Bps > 0 && intra.latency_s >= 0 &&
               inter.latency_s >= 0,
           "[", where, "] link bandwidths must be positive and latencies >= 0");
  TP_CHECK(eff.gemm_max > 0 && eff.gemm_max <= 1 && eff.memory > 0 && eff.memory <= 1 &&
               eff.link > 0 && eff.link <= 1 && eff.gemm_half_flops >= 0,
           "[", where, "] efficiencies must be in (0, 1]");
  TP_CHECK(eff.attention_max >= 0 && eff.attention_max <= 1 && eff.attention_half_seq >= 0, "[",
           where, "] attention_max must be in [0, 1] and attention_half_seq >= 0");
  TP_CHECK(eff.decode_layer_s >= 0 && eff.decode_attention_flops >= 0, "[", where,
           "] decode_layer_us and decode_attention_gflops must be >= 0");
}

ClusterSpec cluster_from_json(const nlohmann::json& j, const std::string& where) {
  TP_CHECK(j.is_object(), "[", where, "] a cluster must be a JSON object");
  ClusterSpec c;
  c.name = j.value("name", where);
  c.nodes = j.value("nodes", 1);
  c.devices_per_node = j.value("devices_per_node", 1);
  c.cores_per_node = j.value("cores_per_node", 0);
  TP_CHECK(j.contains("device"), "[", where, "] missing object \"device\"");
  const auto& d = j.at("device");
  c.memory_bytes = num(d, "memory_gib", where + ": device") * kGiB;
  c.reserved_bytes = d.value("reserved_gib", 0.0) * kGiB;
  c.peak_flops = num(d, "tflops", where + ": device") * 1e12;
  c.memory_Bps = num(d, "memory_bandwidth_gbps", where + ": device") * 1e9;
  c.weight_stream_Bps = stream_rates(d, "weight_stream_gbps", where);
  c.node_memory_Bps = d.value("node_memory_bandwidth_gbps", 0.0) * 1e9;
  TP_CHECK(c.node_memory_Bps >= 0, "[", where, "] device: node_memory_bandwidth_gbps must be >= 0");
  c.node_weight_stream_Bps = stream_rates(d, "node_weight_stream_gbps", where);
  TP_CHECK(j.contains("intra_node") && j.contains("inter_node"), "[", where,
           "] missing \"intra_node\" or \"inter_node\"");
  c.intra = link_from_json(j.at("intra_node"), where + ": intra_node");
  c.inter = link_from_json(j.at("inter_node"), where + ": inter_node");
  if (j.contains("efficiency")) {
    const auto& e = j.at("efficiency");
    c.eff.gemm_max = e.value("gemm_max", c.eff.gemm_max);
    c.eff.gemm_half_flops = e.value("gemm_half_gflop", c.eff.gemm_half_flops * 1e-9) * 1e9;
    c.eff.memory = e.value("memory", c.eff.memory);
    c.eff.link = e.value("link", c.eff.link);
    c.eff.dp_overlap = e.value("dp_overlap", c.eff.dp_overlap);
    c.eff.tp_overlap = e.value("tp_overlap", c.eff.tp_overlap);
    c.eff.fused_elementwise = e.value("fused_elementwise", c.eff.fused_elementwise);
    c.eff.attention_max = e.value("attention_max", c.eff.attention_max);
    c.eff.attention_half_seq = e.value("attention_half_seq", c.eff.attention_half_seq);
    c.eff.decode_layer_s = e.value("decode_layer_us", c.eff.decode_layer_s * 1e6) * 1e-6;
    c.eff.decode_attention_flops =
        e.value("decode_attention_gflops", c.eff.decode_attention_flops * 1e-9) * 1e9;
    c.eff.fused_attention = e.value("fused_attention", c.eff.fused_attention);
    c.eff.tensorpar_buffers = e.value("tensorpar_buffers", c.eff.tensorpar_buffers);
  }
  c.validate(where);
  return c;
}

nlohmann::json cluster_to_json(const ClusterSpec& c) {
  nlohmann::json j = {{"name", c.name},
          {"nodes", c.nodes},
          {"devices_per_node", c.devices_per_node},
          {"device",
           {{"memory_gib", c.memory_bytes / kGiB},
            {"reserved_gib", c.reserved_bytes / kGiB},
            {"tflops", c.peak_flops * 1e-12},
            {"memory_bandwidth_gbps", c.memory_Bps * 1e-9}}},
          {"intra_node", link_to_json(c.intra)},
          {"inter_node", link_to_json(c.inter)},
          {"efficiency",
           {{"gemm_max", c.eff.gemm_max},
            {"gemm_half_gflop", c.eff.gemm_half_flops * 1e-9},
            {"memory", c.eff.memory},
            {"link", c.eff.link},
            {"dp_overlap", c.eff.dp_overlap},
            {"tp_overlap", c.eff.tp_overlap},
            {"fused_elementwise", c.eff.fused_elementwise},
            {"attention_max", c.eff.attention_max},
            {"attention_half_seq", c.eff.attention_half_seq},
            {"decode_layer_us", c.eff.decode_layer_s * 1e6},
            {"decode_attention_gflops", c.eff.decode_attention_flops * 1e-9},
            {"fused_attention", c.eff.fused_attention},
            {"tensorpar_buffers", c.eff.tensorpar_buffers}}}};
  if (!c.weight_stream_Bps.empty()) j["device"]["weight_stream_gbps"] = rates_to_json(c.weight_stream_Bps);
  if (c.cores_per_node > 0) j["cores_per_node"] = c.cores_per_node;
  if (c.node_memory_Bps > 0) j["device"]["node_memory_bandwidth_gbps"] = c.node_memory_Bps * 1e-9;
  if (!c.node_weight_stream_Bps.empty())
    j["device"]["node_weight_stream_gbps"] = rates_to_json(c.node_weight_stream_Bps);
  return j;
}

ClusterSpec read_cluster_file(const std::string& path) {
  std::ifstream f(path);
  TP_CHECK(f.good(), "[read_cluster_file] cannot open ", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f, json_depth_limit("[read_cluster_file] " + path));
  } catch (const nlohmann::json::exception& e) {
    TP_CHECK(false, "[read_cluster_file] ", path, ": invalid JSON: ", e.what());
  }
  return cluster_from_json(j, path);
}

std::vector<std::string> cluster_preset_names() {
  return {"dgx-a100-80g", "dgx-h100", "h200x8", "this-machine"};
}

ClusterSpec cluster_preset(const std::string& name, int nodes) {
  ClusterSpec c;
  if (name == "dgx-a100-80g") {
    // NVLink 3: 12 links x 25 GB/s; HDR InfiniBand 200 Gb/s = 25 GB/s per GPU.
    c = dgx(name, 80, 312, 2039, 300, 12, 25);
  } else if (name == "dgx-h100" || name == "h200x8") {
    // NVLink 4: 18 links x 25 GB/s; NDR 400 Gb/s = 50 GB/s per GPU.
    c = name == "h200x8" ? dgx(name, 141, 989, 4800, 450, 18, 50)
                         : dgx(name, 80, 989, 3350, 450, 18, 50);
    c.eff.fused_attention = true;  // H100-era software runs flash attention
  } else if (name == "this-machine") {
    c = this_machine();
  } else {
    std::string names;
    for (const auto& n : cluster_preset_names()) names += " " + n;
    TP_CHECK(false, "[cluster_preset] unknown cluster \"", name,
             "\": not a file and not a preset (presets:", names, ")");
  }
  if (nodes > 0) c.nodes = nodes;
  c.validate(name);
  return c;
}

ClusterSpec resolve_cluster(const std::string& name_or_path, int nodes) {
  if (std::ifstream(name_or_path).good()) {
    ClusterSpec c = read_cluster_file(name_or_path);
    if (nodes > 0) c.nodes = nodes;
    return c;
  }
  return cluster_preset(name_or_path, nodes);
}

}  // namespace tensorpar::plan
