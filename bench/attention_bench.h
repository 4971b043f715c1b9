// `tensorpar bench attention`: GFLOP/s of the training attention kernels (causal, grouped-query;
// forward, backward, and both together) by sequence length. FLOPs counted as the planner and the
// published FLOP formulas count them: the full T x T square, 4 B T^2 NH HS forward and twice that
// backward, though the causal kernels skip the masked half. `plan --calibrate` fits its rates.
#pragma once

#include <CLI/CLI.hpp>

namespace tensorpar {

// Adds the `attention` subcommand to `tensorpar bench`.
void add_attention_bench(CLI::App& bench);

}  // namespace tensorpar
