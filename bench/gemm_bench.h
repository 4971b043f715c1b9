// `tensorpar bench gemm`: our matmul (f32, bf16, q8_0/q4_1 weights) on tensor-parallel shard
// shapes beside raw oneDNN on the same problem, and the machine peak measured in the same run.
#pragma once

#include <CLI/CLI.hpp>

namespace tensorpar {

// Adds the `gemm` subcommand to `tensorpar bench`.
void add_gemm_bench(CLI::App& bench);

}  // namespace tensorpar
