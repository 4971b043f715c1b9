// MpiCommunicator: one rank per process over an MPI communicator. Every operation is a
// nonblocking MPI call polled with MPI_Test until done or until the CommOptions timeout, which
// fails the op with an Error naming it, the group and the rank, and arms the job's watchdog.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/debug_fingerprint.h"

namespace tensorpar::mpi {

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction) and sets MPI_ERRORS_RETURN on it.
  MpiCommunicator(MPI_Comm comm, std::string name, const CommOptions& options);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override;
  void all_gather(const void* in, void* out, int64_t count, DType dtype) override;
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override;
  void broadcast(void* data, int64_t count, DType dtype, int root) override;
  void all_to_all(const void* in, std::span<const int64_t> send_counts, void* out,
                  std::span<const int64_t> recv_counts, DType dtype) override;
  void send(const void* data, int64_t count, DType dtype, int peer) override;
  void recv(void* data, int64_t count, DType dtype, int peer) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;

  // Polls req with MPI_Test until complete (true) or until timeout_s passed (false); MPI errors
  // come back in *rc. Spins for spin_s (OpenMPI's nonblocking collectives only progress inside
  // MPI_Test, so a yield costs a whole time slice when the cores are busy), then yields, then
  // naps, so oversubscribed ranks still progress.
  static bool poll(MPI_Request& req, MPI_Status* status, double timeout_s, int* rc,
                   double spin_s = 50e-6);

 private:
  // Starts a collective: refuses on a broken group, counts it, and in debug mode compares its
  // fingerprint (comm/debug_fingerprint.h) across the group.
  void begin(CommOp op, DType dtype, int64_t count, ReduceOp reduce = ReduceOp::kSum,
             int64_t root = -1);
  // "[mpi all_reduce] <rest> (group mpi:world, rank 1 of 4, op #17)".
  std::string where(const char* op) const;
  void check(int rc, const char* op);
  // Marks the group broken, arms the job watchdog and throws Error(msg).
  [[noreturn]] void fail(const std::string& msg);
  void wait_op(MPI_Request& req, const char* op, MPI_Status* status = MPI_STATUS_IGNORE);
  // After a timeout: which world ranks did not answer the failure channel's probe, in words.
  std::string blame() const;
  void check_all_to_all_counts(std::span<const int64_t> send_counts,
                               std::span<const int64_t> recv_counts);
  // Frees the buffers of sends that have completed.
  void reap_sends();

  // A send in flight from a copy of its data (send never waits for the receive).
  struct PendingSend {
    MPI_Request req = MPI_REQUEST_NULL;
    std::unique_ptr<std::byte[]> data;
  };

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::string name_;
  CommOptions options_;
  double spin_s_ = 50e-6;  // pure spinning before yielding (see poll)
  uint64_t seq_ = 0;     // collectives started on this communicator
  bool broken_ = false;  // an op failed: the group's state is unknown, every later op throws
  std::vector<float> scratch_;       // f32 widening of 16-bit inputs
  std::vector<uint8_t> scratch_bytes_;  // staging for aliased buffers
  std::deque<PendingSend> pending_sends_;  // oldest first
};

}  // namespace tensorpar::mpi
