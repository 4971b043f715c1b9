// Entry points of the MPI backend: availability and this process's world communicator.
#include "comm/mpi/mpi_backend.h"

#include "comm/mpi/mpi_check.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/mpi_failure_channel.h"
#include "comm/mpi/mpi_runtime.h"
#include "core/error.h"

namespace tensorpar::mpi {

bool is_available() { return true; }

std::unique_ptr<Communicator> create_world(const CommOptions& options) {
  MpiRuntime& runtime = MpiRuntime::get();
  TP_CHECK(!runtime.failed(), "[mpi::create_world] the MPI job failed earlier and is being aborted");
  // Our own copy of the world, so our errhandler and traffic stay apart from the application's.
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Request req;
  mpi_check(MPI_Comm_idup(MPI_COMM_WORLD, &world, &req), "mpi::create_world");
  int rc = MPI_SUCCESS;
  if (!MpiCommunicator::poll(req, MPI_STATUS_IGNORE, options.timeout_s, &rc)) {
    const std::string msg = detail::concat(
        "[mpi::create_world] timed out after ", options.timeout_s,
        " s duplicating MPI_COMM_WORLD: not every rank reached it (a rank died or stalled)");
    runtime.fail_job(msg, options.timeout_s);
    throw Error(msg);
  }
  mpi_check(rc, "mpi::create_world");
  runtime.open_channel(options.timeout_s);
  return std::make_unique<MpiCommunicator>(world, "mpi:world", options);
}

int64_t host_id(const CommOptions& options) {
  MpiRuntime& runtime = MpiRuntime::get();
  MPI_Comm node = MPI_COMM_NULL;
  runtime.run_with_watchdog("MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) while finding the hosts",
                            options.timeout_s, [&] {
                              mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0,
                                                            MPI_INFO_NULL, &node),
                                        "mpi::host_id");
                            });
  MPI_Group node_group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  MPI_Comm_group(node, &node_group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  const int first = 0;
  int first_in_world = 0;
  MPI_Group_translate_ranks(node_group, 1, &first, world_group, &first_in_world);
  MPI_Group_free(&node_group);
  MPI_Group_free(&world_group);
  MPI_Comm_free(&node);
  return first_in_world;
}

void announce_failure(const std::string& why, double grace_s) {
  MpiRuntime& runtime = MpiRuntime::get();
  if (runtime.failed()) return;  // a communicator failure: the peers see it themselves
  if (FailureChannel* channel = runtime.channel()) channel->announce(why);
  runtime.fail_job(why, grace_s, /*say=*/false);
}

}  // namespace tensorpar::mpi
