// Names, options from the environment, and backend selection.
#include "comm/communicator.h"

#include <cstdlib>
#include <string>

#include "comm/hybrid/hierarchical_communicator.h"
#include "comm/mpi/mpi_backend.h"
#include "core/error.h"

namespace tensorpar {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

std::string_view backend_name(Backend b) {
  switch (b) {
    case Backend::kThreads: return "threads";
    case Backend::kMpi: return "mpi";
    case Backend::kNccl: return "nccl";
    case Backend::kHybrid: return "hybrid";
  }
  return "?";
}

Backend backend_from_name(std::string_view name) {
  if (name == "threads") return Backend::kThreads;
  if (name == "mpi") return Backend::kMpi;
  if (name == "nccl") return Backend::kNccl;
  if (name == "hybrid") return Backend::kHybrid;
  TP_CHECK(false, "[backend_from_name] unknown backend '", name, "', expected threads | mpi | hybrid | nccl");
  return Backend::kThreads;
}

CommOptions CommOptions::from_env() {
  CommOptions o;
  if (const char* t = std::getenv("TENSORPAR_COMM_TIMEOUT")) {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    TP_CHECK(end != t && *end == '\0' && v > 0, "[CommOptions] TENSORPAR_COMM_TIMEOUT='", t,
             "' is not a positive number of seconds");
    o.timeout_s = v;
  }
  if (const char* d = std::getenv("TENSORPAR_COMM_DEBUG")) o.debug = std::string(d) == "1";
  return o;
}

std::unique_ptr<Communicator> make_communicator(Backend backend, const CommOptions& options) {
  switch (backend) {
    case Backend::kMpi:
      TP_CHECK(mpi::is_available(), "[make_communicator] this build has no MPI backend");
      return mpi::create_world(options);
    case Backend::kHybrid: {
      TP_CHECK(mpi::is_available(), "[make_communicator] this build has no MPI backend (hybrid runs over MPI)");
      std::unique_ptr<Communicator> world = mpi::create_world(options);
      return make_hierarchical(std::move(world), mpi::host_id(options));
    }
    case Backend::kThreads:
      TP_CHECK(false, "[make_communicator] the threads backend starts its ranks together: use launch_ranks");
      break;
    case Backend::kNccl:
      TP_CHECK(false, "[make_communicator] nccl needs a host group: use nccl::create(host, device, options)");
      break;
  }
  return nullptr;
}

}  // namespace tensorpar
