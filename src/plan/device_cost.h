// Time of work on one device: a GEMM at the efficiency its size reaches, memory-bound work at
// the calibrated fraction of memory bandwidth (at most its share of the node's, where the devices
// of a node share one memory bus: ClusterSpec::node_memory_Bps).
#pragma once

#include <string>

#include "plan/cluster.h"

namespace tensorpar::plan {

// Fraction of peak a GEMM of `flops` reaches: gemm_max * x / (x + gemm_half_flops).
double gemm_efficiency(const EfficiencySpec& e, double flops);
// The share of its peak a device computes at: cores / devices where a CPU node's ranks outnumber
// its cores (ClusterSpec::cores_per_node; they time-slice them), else 1.
double compute_share(const ClusterSpec& c);
// Where ranks time-slice a CPU node's cores and do not divide evenly over them, the busiest core
// holds ceil(devices / cores) of them: ranks that meet often (every layer, every micro-batch) run
// at that core's pace, this factor (>= 1) slower than compute_share says. 1 otherwise.
double lockstep_slowdown(const ClusterSpec& c);
// Time of `count` GEMMs of `flops` each.
double gemm_time(const ClusterSpec& c, double flops, double count = 1);
// Time of `count` attention score/context products of `flops` each at sequence length `seq`:
// at the calibrated attention curve (EfficiencySpec::attention_max), else as GEMMs.
double attention_time(const ClusterSpec& c, double flops, double seq, double count = 1);
double memory_time(const ClusterSpec& c, double bytes);
// Time to stream `bytes` of decode weights in `format` (ClusterSpec::weight_stream_Bps, else
// memory_time).
double weight_stream_time(const ClusterSpec& c, double bytes, const std::string& format);

}  // namespace tensorpar::plan
