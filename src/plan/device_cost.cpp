// GEMM efficiency rises with size and saturates (a rational curve with two fitted constants).
#include "plan/device_cost.h"

#include <algorithm>

namespace tensorpar::plan {

double gemm_efficiency(const EfficiencySpec& e, double flops) {
  if (flops <= 0) return e.gemm_max;
  return e.gemm_max * flops / (flops + e.gemm_half_flops);
}

double compute_share(const ClusterSpec& c) {
  if (c.cores_per_node <= 0 || c.devices_per_node <= c.cores_per_node) return 1;
  return double(c.cores_per_node) / c.devices_per_node;
}

double lockstep_slowdown(const ClusterSpec& c) {
  if (compute_share(c) >= 1) return 1;
  const int busiest = (c.devices_per_node + c.cores_per_node - 1) / c.cores_per_node;
  return compute_share(c) * busiest;
}

namespace {
// `count` pieces of work of `flops` each at `efficiency` of the device's share of its peak.
double compute_time(const ClusterSpec& c, double flops, double count, double efficiency) {
  if (flops <= 0 || count <= 0) return 0;
  return count * flops / (c.peak_flops * compute_share(c) * efficiency);
}
}  // namespace

double gemm_time(const ClusterSpec& c, double flops, double count) {
  return compute_time(c, flops, count, gemm_efficiency(c.eff, flops));
}

double attention_time(const ClusterSpec& c, double flops, double seq, double count) {
  if (c.eff.attention_max <= 0) return gemm_time(c, flops, count);
  return compute_time(c, flops, count,
                      c.eff.attention_max * seq / (seq + c.eff.attention_half_seq));
}

namespace {

// A device's share of a shared memory bus (all devices of the node streaming at once), or its own
// rate when the node's is not given.
double shared(const ClusterSpec& c, double own, double node) {
  return node > 0 ? std::min(own, node / std::max(1, c.devices_per_node)) : own;
}

}  // namespace

double memory_time(const ClusterSpec& c, double bytes) {
  return bytes <= 0 ? 0 : bytes / shared(c, c.memory_Bps * c.eff.memory, c.node_memory_Bps);
}

double weight_stream_time(const ClusterSpec& c, double bytes, const std::string& format) {
  const auto it = c.weight_stream_Bps.find(format);
  if (it == c.weight_stream_Bps.end() || bytes <= 0) return memory_time(c, bytes);
  const auto node = c.node_weight_stream_Bps.find(format);
  return bytes / shared(c, it->second, node == c.node_weight_stream_Bps.end() ? 0 : node->second);
}

}  // namespace tensorpar::plan
