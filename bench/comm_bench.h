// `tensorpar bench comm`: nccl-tests-style sweep of one collective over message sizes, on the
// threads or the MPI backend, with the memory-traffic limit (a memcpy measured in the same run)
// beside each figure as mem_eff.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace tensorpar {

struct CommBenchConfig {
  std::string backend = "threads";  // threads | mpi (under mpirun)
  std::string op = "all_reduce";    // all_reduce | all_gather | reduce_scatter | broadcast | all_to_all
  int ranks = 2;                    // threads backend only; mpi uses the world
  int threads_per_rank = 0;
  std::string dtype = "f32";
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t(64) << 20;
  double seconds_per_size = 0.2;  // measuring time per size, after warm-up
  bool json = false;
  // mpi only: time OpenMPI's blocking collectives called directly on MPI_COMM_WORLD (the peer
  // baseline, no timeout protection) instead of our Communicator; reported as backend "mpi-raw".
  bool raw_mpi = false;
};

// Runs the sweep and prints (on rank 0) a table, or one JSON object per size with keys bench,
// op, backend, ranks, bytes, time_us, algbw_gbps, busbw_gbps, mem_eff (and dtype, bmem_gbps).
void run_comm_bench(const CommBenchConfig& config);

// Adds the `comm` subcommand to `tensorpar bench`.
void add_comm_bench(CLI::App& bench);

}  // namespace tensorpar
