// NcclCommunicator: one GPU per rank, device buffers, NCCL collectives on a private stream.
// Every call is enqueued, then the stream is polled (cudaStreamQuery) against the CommOptions
// timeout; on timeout or an asynchronous NCCL error the communicator is aborted
// (ncclCommAbort) and the op fails with an Error naming it, the group and the rank.
// Differences from the host backends: f16/bf16 are reduced by NCCL in their own precision
// (rounded at every step), not widened to f32 once; a group of one still runs NCCL (a device
// copy), so one GPU exercises the same path as many.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/debug_fingerprint.h"

namespace tensorpar::nccl {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `host`: rank 0 makes the ncclUniqueId and host broadcasts it. `host` must
  // outlive this communicator unless it is owned (owned_host, from split).
  NcclCommunicator(Communicator& host, std::unique_ptr<Communicator> owned_host, int device,
                   const CommOptions& options);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

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

 private:
  // Refuses on an aborted communicator, selects the device, counts the op and (debug) compares
  // fingerprints over the host group.
  void begin(CommOp op, DType dtype, int64_t count, ReduceOp reduce = ReduceOp::kSum,
             int64_t root = -1);
  std::string where(const char* op) const;
  // Checks an NCCL call's result; ncclInProgress (nonblocking communicator) is waited out.
  void call(ncclResult_t rc, const char* op);
  // Waits for the stream under the timeout.
  void sync(const char* op);
  [[noreturn]] void abort_and_throw(const std::string& msg);
  void* scratch(int64_t bytes);  // device staging, grown on demand

  Communicator& host_;
  std::unique_ptr<Communicator> owned_host_;
  int device_ = 0;
  int rank_ = 0;
  int size_ = 1;
  std::string name_;
  CommOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  uint64_t seq_ = 0;
  bool aborted_ = false;
  void* scratch_ = nullptr;
  int64_t scratch_bytes_ = 0;
};

}  // namespace tensorpar::nccl
