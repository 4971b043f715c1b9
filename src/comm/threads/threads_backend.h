// The threads backend: the ranks are threads of this process and meet in shared memory. Usually
// started through launch_ranks (comm/launch.h); tests and tools may build a world directly.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace tensorpar::threads {

// A world of n_ranks ranks named "threads:world": element r is rank r's communicator, to be used
// by one thread at a time. Groups made by split() share the world's abort flag.
std::vector<std::unique_ptr<Communicator>> create_world(int n_ranks, const CommOptions& options);

// Aborts the world that `comm` (a threads communicator) belongs to: every pending and later
// collective of every rank, in every group split from it, fails with an Error quoting `reason`.
void abort_world(Communicator& comm, const std::string& reason);

// Whether the world that `comm` belongs to was aborted.
bool is_aborted(Communicator& comm);
// Whether every rank of comm's world other than comm's own has finished (mark_exited).
bool others_exited(Communicator& comm);

// Records that comm's rank has finished: peers waiting on it fail at once instead of timing out.
void mark_exited(Communicator& comm);

}  // namespace tensorpar::threads
