// GEMM efficiency rises with size and saturates (a rational curve with two fitted constants).
#include "plan/device_cost.h"

namespace tensorpar::plan {

double gemm_efficiency(const EfficiencySpec& e, double flops) {
  if (flops <= 0) return e.gemm_max;
  return e.gemm_max * flops / (flops + e.gemm_half_flops);
}

double gemm_time(const ClusterSpec& c, double flops, double count) {
  if (flops <= 0 || count <= 0) return 0;
  return count * flops / (c.peak_flops * gemm_efficiency(c.eff, flops));
}

double memory_time(const ClusterSpec& c, double bytes) {
  return bytes <= 0 ? 0 : bytes / (c.memory_Bps * c.eff.memory);
}

double weight_stream_time(const ClusterSpec& c, double bytes, const std::string& format) {
  const auto it = c.weight_stream_Bps.find(format);
  if (it == c.weight_stream_Bps.end() || bytes <= 0) return memory_time(c, bytes);
  return bytes / it->second;
}

}  // namespace tensorpar::plan
