// `tensorpar bench decode`: batched decode, the server's engine step, measured directly: R
// sequences each decode one token per step through one forward_batch (R rows sharing every weight
// read), for several R; tokens/s and its ratio to R = 1.
#pragma once

#include <CLI/CLI.hpp>

namespace tensorpar {

// Adds the `decode` subcommand to `tensorpar bench`.
void add_decode_batch_bench(CLI::App& bench);

}  // namespace tensorpar
