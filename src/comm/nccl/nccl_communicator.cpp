// NcclCommunicator: NCCL collectives on device buffers; all_to_all as grouped send/recv. The
// communicator is nonblocking (ncclConfig_t::blocking = 0) so neither init nor any call can
// block the host past the timeout; waits poll cudaStreamQuery and ncclCommGetAsyncError.
#include "comm/nccl/nccl_communicator.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/nccl/nccl_check.h"
#include "comm/nccl/nccl_types.h"
#include "core/error.h"

namespace tensorpar::nccl {

namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Short spin, then yield, then naps: a GPU op of microseconds should not pay a sleep.
void backoff(Clock::time_point start) {
  const auto waited = Clock::now() - start;
  if (waited > std::chrono::milliseconds(5)) {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  } else if (waited > std::chrono::microseconds(20)) {
    std::this_thread::yield();
  }
}

bool overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + uintptr_t(b_bytes) && pb < pa + uintptr_t(a_bytes);
}

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator& host, std::unique_ptr<Communicator> owned_host,
                                   int device, const CommOptions& options)
    : host_(host), owned_host_(std::move(owned_host)), device_(device), rank_(host.rank()),
      size_(host.size()), name_("nccl:" + host.name()), options_(options) {
  TP_CHECK(options_.timeout_s > 0, "[nccl::create] timeout: got ", options_.timeout_s,
           " s, expected > 0");
  int n_devices = 0;
  cuda_check(cudaGetDeviceCount(&n_devices), "nccl::create");
  TP_CHECK(device >= 0 && device < n_devices, "[nccl::create] device: got ", device,
           ", expected in [0, ", n_devices, ") (rank ", rank_, " of ", name_, ")");
  cuda_check(cudaSetDevice(device_), "nccl::create");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank_ == 0) nccl_check(ncclGetUniqueId(&id), "nccl::create");
  host_.broadcast(&id, int64_t(sizeof(id)), DType::kU8, 0);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and every call return at once; we poll under the timeout
  const ncclResult_t rc = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
  if (rc != ncclInProgress) nccl_check(rc, "nccl::create");
  call(ncclInProgress, "init");  // waits until the communicator is ready
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "nccl::create");
}

NcclCommunicator::~NcclCommunicator() {
  if (scratch_) cudaFree(scratch_);
  if (stream_) cudaStreamDestroy(stream_);
  if (comm_ && !aborted_) ncclCommDestroy(comm_);
}

std::string NcclCommunicator::where(const char* op) const {
  return detail::concat("group ", name_, ", rank ", rank_, " of ", size_, ", device ", device_,
                        ", op #", seq_, " ", op);
}

void NcclCommunicator::abort_and_throw(const std::string& msg) {
  if (!aborted_ && comm_) ncclCommAbort(comm_);  // frees the GPU from kernels that cannot finish
  aborted_ = true;
  throw Error(msg);
}

void NcclCommunicator::call(ncclResult_t rc, const char* op) {
  if (rc == ncclSuccess) return;
  if (rc != ncclInProgress) {
    try {
      nccl_check(rc, detail::concat("nccl ", op));
    } catch (const Error& e) {
      abort_and_throw(detail::concat(e.what(), " (", where(op), ")"));
    }
  }
  const auto start = Clock::now();
  const auto deadline = deadline_after(options_.timeout_s);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
    if (q != ncclSuccess) state = q;
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      try {
        nccl_check(state, detail::concat("nccl ", op));
      } catch (const Error& e) {
        abort_and_throw(detail::concat(e.what(), " (", where(op), ")"));
      }
    }
    if (Clock::now() > deadline) {
      abort_and_throw(detail::concat("[nccl ", op, "] timed out after ", options_.timeout_s,
                                     " s waiting for NCCL (", where(op),
                                     "): a peer rank died or stalled; the communicator was aborted"));
    }
    backoff(start);
  }
}

void NcclCommunicator::sync(const char* op) {
  const auto start = Clock::now();
  const auto deadline = deadline_after(options_.timeout_s);
  for (int64_t it = 0;; ++it) {
    const cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) {
      try {
        cuda_check(q, detail::concat("nccl ", op));
      } catch (const Error& e) {
        abort_and_throw(detail::concat(e.what(), " (", where(op), ")"));
      }
    }
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess &&
        state != ncclInProgress) {
      try {
        nccl_check(state, detail::concat("nccl ", op));
      } catch (const Error& e) {
        abort_and_throw(detail::concat(e.what(), " (", where(op), ")"));
      }
    }
    if (Clock::now() > deadline) {
      abort_and_throw(detail::concat("[nccl ", op, "] timed out after ", options_.timeout_s,
                                     " s (", where(op), "): a peer rank died, stalled, or called ",
                                     "a different collective; the NCCL communicator was aborted"));
    }
    backoff(start);
  }
}

void NcclCommunicator::begin(CommOp op, DType dtype, int64_t count, ReduceOp reduce, int64_t root) {
  const std::string name(comm_op_name(op));
  TP_CHECK(!aborted_, "[nccl ", name, "] group ", name_, " was aborted by an earlier failure (rank ",
           rank_, ")");
  TP_CHECK(count >= 0, "[nccl ", name, "] count: got ", count, ", expected >= 0");
  cuda_check(cudaSetDevice(device_), "nccl " + name);
  ++seq_;
  if (!options_.debug || size_ == 1) return;
  const OpFingerprint mine = make_fingerprint(op, dtype, count, reduce, root, seq_);
  check_fingerprints(mine, size_, name_, [&](const int64_t* in, int64_t* out) {
    host_.all_gather(in, out, kFingerprintWords, DType::kI64);
  });
}

void* NcclCommunicator::scratch(int64_t bytes) {
  if (bytes > scratch_bytes_) {
    if (scratch_) cuda_check(cudaFree(scratch_), "nccl scratch");
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    cuda_check(cudaMalloc(&scratch_, size_t(bytes)), "nccl scratch");
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

// A group of one still goes through NCCL (a device copy): the same path on one GPU as on many.
void NcclCommunicator::all_reduce(const void* in, void* out, int64_t count, DType dtype,
                                  ReduceOp op) {
  TP_CHECK(dtype != DType::kU8, "[nccl all_reduce] u8 cannot be reduced");
  const ncclDataType_t type = nccl_type(dtype);
  begin(CommOp::kAllReduce, dtype, count, op);
  call(ncclAllReduce(in, out, size_t(count), type, nccl_op(op), comm_, stream_), "all_reduce");
  sync("all_reduce");
}

void NcclCommunicator::all_gather(const void* in, void* out, int64_t count, DType dtype) {
  const ncclDataType_t type = nccl_type(dtype);
  begin(CommOp::kAllGather, dtype, count);
  call(ncclAllGather(in, out, size_t(count), type, comm_, stream_), "all_gather");
  sync("all_gather");
}

void NcclCommunicator::reduce_scatter(const void* in, void* out, int64_t count, DType dtype,
                                      ReduceOp op) {
  TP_CHECK(dtype != DType::kU8, "[nccl reduce_scatter] u8 cannot be reduced");
  const ncclDataType_t type = nccl_type(dtype);
  begin(CommOp::kReduceScatter, dtype, count, op);
  const int64_t bytes = count * dtype_nbytes(dtype, 1);
  const void* own_slot = static_cast<const char*>(in) + rank_ * bytes;
  if (out == own_slot || !overlap(in, bytes * size_, out, bytes)) {  // NCCL's in-place or disjoint
    call(ncclReduceScatter(in, out, size_t(count), type, nccl_op(op), comm_, stream_),
         "reduce_scatter");
  } else {  // e.g. out == in (MPI's in-place form): reduce into staging, then copy
    void* tmp = scratch(bytes);
    call(ncclReduceScatter(in, tmp, size_t(count), type, nccl_op(op), comm_, stream_),
         "reduce_scatter");
    cuda_check(cudaMemcpyAsync(out, tmp, size_t(bytes), cudaMemcpyDeviceToDevice, stream_),
               "nccl reduce_scatter");
  }
  sync("reduce_scatter");
}

void NcclCommunicator::broadcast(void* data, int64_t count, DType dtype, int root) {
  const ncclDataType_t type = nccl_type(dtype);
  TP_CHECK(root >= 0 && root < size_, "[nccl broadcast] root: got ", root, ", expected in [0, ",
           size_, ") (group ", name_, ")");
  begin(CommOp::kBroadcast, dtype, count, ReduceOp::kSum, root);
  call(ncclBroadcast(data, data, size_t(count), type, root, comm_, stream_), "broadcast");
  sync("broadcast");
}

void NcclCommunicator::all_to_all(const void* in, std::span<const int64_t> send_counts, void* out,
                                  std::span<const int64_t> recv_counts, DType dtype) {
  const ncclDataType_t type = nccl_type(dtype);
  TP_CHECK(int64_t(send_counts.size()) == size_ && int64_t(recv_counts.size()) == size_,
           "[nccl all_to_all] counts: got ", send_counts.size(), " send and ", recv_counts.size(),
           " recv counts, expected ", size_, " each (group ", name_, ")");
  int64_t stotal = 0, rtotal = 0;
  for (size_t r = 0; r < send_counts.size(); ++r) {
    TP_CHECK(send_counts[r] >= 0 && recv_counts[r] >= 0, "[nccl all_to_all] counts for rank ", r,
             ": got send ", send_counts[r], ", recv ", recv_counts[r], ", expected >= 0");
    stotal += send_counts[r];
    rtotal += recv_counts[r];
  }
  begin(CommOp::kAllToAll, dtype, size_);
  const int64_t esize = dtype_nbytes(dtype, 1);
  const char* src = static_cast<const char*>(in);
  if (overlap(in, stotal * esize, out, rtotal * esize)) {  // in place: stage the input
    void* tmp = scratch(stotal * esize);
    cuda_check(cudaMemcpyAsync(tmp, in, size_t(stotal * esize), cudaMemcpyDeviceToDevice, stream_),
               "nccl all_to_all");
    src = static_cast<const char*>(tmp);
  }
  char* dst = static_cast<char*>(out);
  call(ncclGroupStart(), "all_to_all");
  int64_t soff = 0, roff = 0;
  for (int r = 0; r < size_; ++r) {
    const int64_t sn = send_counts[size_t(r)], rn = recv_counts[size_t(r)];
    if (sn > 0) call(ncclSend(src + soff * esize, size_t(sn), type, r, comm_, stream_), "all_to_all");
    if (rn > 0) call(ncclRecv(dst + roff * esize, size_t(rn), type, r, comm_, stream_), "all_to_all");
    soff += sn;
    roff += rn;
  }
  call(ncclGroupEnd(), "all_to_all");
  sync("all_to_all");
}

void NcclCommunicator::send(const void* data, int64_t count, DType dtype, int peer) {
  const ncclDataType_t type = nccl_type(dtype);
  TP_CHECK(peer >= 0 && peer < size_ && peer != rank_, "[nccl send] peer: got ", peer,
           ", expected another rank in [0, ", size_, ") (group ", name_, ")");
  TP_CHECK(!aborted_, "[nccl send] group ", name_, " was aborted by an earlier failure");
  cuda_check(cudaSetDevice(device_), "nccl send");
  call(ncclSend(data, size_t(count), type, peer, comm_, stream_), "send");
  sync("send");
}

void NcclCommunicator::recv(void* data, int64_t count, DType dtype, int peer) {
  const ncclDataType_t type = nccl_type(dtype);
  TP_CHECK(peer >= 0 && peer < size_ && peer != rank_, "[nccl recv] peer: got ", peer,
           ", expected another rank in [0, ", size_, ") (group ", name_, ")");
  TP_CHECK(!aborted_, "[nccl recv] group ", name_, " was aborted by an earlier failure");
  cuda_check(cudaSetDevice(device_), "nccl recv");
  call(ncclRecv(data, size_t(count), type, peer, comm_, stream_), "recv");
  sync("recv");
}

void NcclCommunicator::barrier() {
  begin(CommOp::kBarrier, DType::kU8, 0);
  // NCCL has no barrier: a one-element all-reduce orders every rank.
  void* one = scratch(sizeof(float));
  call(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm_, stream_), "barrier");
  sync("barrier");
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  TP_CHECK(!aborted_, "[nccl split] group ", name_, " was aborted by an earlier failure");
  // The child gets its own host group (for its ncclUniqueId and debug checks) and NCCL comm.
  std::unique_ptr<Communicator> child_host = host_.split(color, key);
  // A host backend leaves a rank out of every group (no communicator) for a negative color;
  // NCCL needs a group to bootstrap over, so this is the caller's error, reported here.
  TP_CHECK(child_host != nullptr, "[nccl split] host group ", host_.name(), " returned no group for color ",
           color, " (rank ", rank_, " of ", name_, "): expected a color >= 0");
  Communicator& h = *child_host;
  return std::make_unique<NcclCommunicator>(h, std::move(child_host), device_, options_);
}

}  // namespace tensorpar::nccl
