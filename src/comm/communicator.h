// The Communicator: the only way ranks meet. Narrow and
// synchronous; every call has a timeout (CommOptions) and fails with an Error naming the op,
// the group and the rank at fault instead of hanging. Buffers are host memory for threads/mpi
// and device memory for nccl; counts are in elements of `dtype`.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tensorpar {

enum class ReduceOp : uint8_t { kSum, kMax, kMin };
// kHybrid: MPI processes, arranged in two levels by host (comm/hybrid/hierarchical_communicator.h).
enum class Backend : uint8_t { kThreads, kMpi, kNccl, kHybrid };

std::string_view reduce_op_name(ReduceOp op);
std::string_view backend_name(Backend b);
Backend backend_from_name(std::string_view name);  // "threads" | "mpi" | "hybrid" | "nccl"
// Whether each rank is its own process of an MPI job (mpi, hybrid): the world is the MPI world.
constexpr bool is_mpi_job(Backend b) { return b == Backend::kMpi || b == Backend::kHybrid; }

struct CommOptions {
  double timeout_s = 300;  // every blocking wait; TENSORPAR_COMM_TIMEOUT overrides the default
  bool debug = false;      // compare op fingerprints across the group first (TENSORPAR_COMM_DEBUG=1)
  // mpi: how long a wait spins before it yields the core; < 0: decided by the backend. launch_ranks
  // sets it long (2 ms) where every rank of the node has cores of its own, short (50 us) where
  // ranks share cores, so that a peer on the same core gets to run.
  double spin_s = -1;
  // Defaults with the environment variables applied.
  static CommOptions from_env();
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Names the group in errors, e.g. "threads:world" or "mpi:tp".
  virtual std::string name() const = 0;

  // out = op over ranks of in; in == out is allowed. Every rank ends bitwise identical.
  // f16/bf16 are reduced in f32.
  virtual void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) = 0;
  // out[r*count .. (r+1)*count) = rank r's in.
  virtual void all_gather(const void* in, void* out, int64_t count, DType dtype) = 0;
  // out = op over ranks of in[rank*count .. (rank+1)*count) (in holds size()*count).
  virtual void reduce_scatter(const void* in, void* out, int64_t count, DType dtype,
                              ReduceOp op) = 0;
  virtual void broadcast(void* data, int64_t count, DType dtype, int root) = 0;
  // Sends send_counts[r] elements to rank r (packed in rank order in `in`) and receives
  // recv_counts[r] from rank r (packed in rank order in `out`).
  virtual void all_to_all(const void* in, std::span<const int64_t> send_counts, void* out,
                          std::span<const int64_t> recv_counts, DType dtype) = 0;
  // Point to point; messages from one rank to another arrive in the order sent. send returns
  // once `data` may be reused; on threads and mpi the message is buffered, so a send never waits
  // for its receive (nccl's does: ncclSend). recv waits for the message (under the timeout).
  virtual void send(const void* data, int64_t count, DType dtype, int peer) = 0;
  virtual void recv(void* data, int64_t count, DType dtype, int peer) = 0;
  virtual void barrier() = 0;
  // Ranks with the same color form a new group, ordered by (key, old rank).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Conveniences over contiguous tensors and spans.
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::kSum) {
    all_reduce(t.raw(), t.raw(), t.numel(), t.dtype(), op);
  }
  template <typename T>
  void all_reduce(std::span<T> s, ReduceOp op = ReduceOp::kSum) {
    all_reduce(s.data(), s.data(), int64_t(s.size()), dtype_of<T>(), op);
  }
  template <typename T>
  void broadcast(std::span<T> s, int root) {
    broadcast(s.data(), int64_t(s.size()), dtype_of<T>(), root);
  }
};

// Creates this process's world communicator for mpi and hybrid (after MPI_Init_thread) or nccl.
// The threads backend needs a group of ranks at once: see comm/launch.h.
std::unique_ptr<Communicator> make_communicator(Backend backend, const CommOptions& options);

}  // namespace tensorpar
