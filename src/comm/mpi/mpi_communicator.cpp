// MpiCommunicator: OpenMPI's own collectives in their nonblocking form, polled against the
// timeout. 16-bit floats are widened to f32, reduced, and rounded once at the end.
#include "comm/mpi/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <cstring>
#include <thread>

#include "comm/mpi/mpi_check.h"
#include "comm/mpi/mpi_failure_channel.h"
#include "comm/mpi/mpi_runtime.h"
#include "core/error.h"
#include "core/half.h"
#include "core/threading.h"

namespace tensorpar::mpi {

namespace {

using Clock = std::chrono::steady_clock;

// MPI counts are int; larger all-reduces and broadcasts go in chunks of this many elements.
constexpr int64_t kMaxChunk = int64_t(1) << 30;
// All-reduces run in pieces of this many bytes (see MpiCommunicator::all_reduce).
constexpr int64_t kPipelineBytes = int64_t(512) << 10;
constexpr int kTagP2p = 7;

bool is_16bit_float(DType t) { return t == DType::kBF16 || t == DType::kF16; }

void widen(const void* in, float* out, int64_t n, DType t) {
  const uint16_t* src = static_cast<const uint16_t*>(in);
  if (t == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(bf16{src[i]});
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(f16{src[i]});
  }
}

void narrow(const float* in, void* out, int64_t n, DType t) {
  uint16_t* dst = static_cast<uint16_t*>(out);
  if (t == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(in[i]).bits;
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(in[i]).bits;
  }
}

bool overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + uintptr_t(b_bytes) && pb < pa + uintptr_t(a_bytes);
}

}  // namespace

bool MpiCommunicator::poll(MPI_Request& req, MPI_Status* status, double timeout_s, int* rc,
                           double spin_s) {
  const auto start = Clock::now();
  const auto spin = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spin_s));
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(timeout_s));
  FailureChannel* channel = MpiRuntime::get().channel();
  // A thread that only waits on communication sleeps between polls at once (core/threading.h).
  const bool sleep_at_once = sleeping_comm_waits();
  for (int64_t it = 0;; ++it) {
    int done = 0;
    *rc = MPI_Test(&req, &done, status);
    if (*rc != MPI_SUCCESS || done) return true;
    if (sleep_at_once) std::this_thread::sleep_for(std::chrono::microseconds(50));
    if ((it & 31) != 31) continue;
    if (channel) {  // answer peers' probes; give up at once when a peer announced its failure
      channel->service();
      if (channel->peer_failure_rank() >= 0) return false;
    }
    const auto now = Clock::now();
    if (now > deadline) return false;
    const auto waited = now - start;
    if (waited > std::chrono::milliseconds(20)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else if (waited > spin) {
      std::this_thread::yield();  // a peer may need this core (oversubscribed ranks)
    }
  }
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, const CommOptions& options)
    : comm_(comm), name_(std::move(name)), options_(options) {
  mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MpiCommunicator " + name_);
  mpi_check(MPI_Comm_rank(comm_, &rank_), "MpiCommunicator " + name_);
  mpi_check(MPI_Comm_size(comm_, &size_), "MpiCommunicator " + name_);
  TP_CHECK(options_.timeout_s > 0, "[MpiCommunicator] timeout: got ", options_.timeout_s,
           " s, expected > 0");
  MpiRuntime::get().note_timeout(options_.timeout_s);
  // Spin long only when every rank of this node has a core of its own: as launch_ranks found
  // (options.spin_s), else counted among the cores this process may run on (a cpuset, a
  // container's or a simulated host's), not the machine's.
  if (options_.spin_s >= 0) {
    spin_s_ = options_.spin_s;
  } else {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const long local_ranks = local ? std::max(1L, std::strtol(local, nullptr, 10)) : 1;
    if (local_ranks <= long(available_cpus().size())) spin_s_ = 2e-3;
  }
}

MpiCommunicator::~MpiCommunicator() {
  int fin = 0;
  MPI_Finalized(&fin);
  // Sends still in flight complete first (their receivers are on their way), within the
  // timeout; unwinding from a failure, after the job failed, or past the timeout, they and the
  // group are left to MPI_Abort (their buffers leaked: MPI may still read them).
  bool in_flight = false;
  if (!fin && !broken_ && std::uncaught_exceptions() == 0 && !MpiRuntime::get().failed()) {
    for (PendingSend& p : pending_sends_) {
      int rc = MPI_SUCCESS;
      if (!poll(p.req, MPI_STATUS_IGNORE, options_.timeout_s, &rc, spin_s_) || rc != MPI_SUCCESS) {
        std::fprintf(stderr, "[mpi] %s: a send to a rank that never received it is still in flight at exit\n",
                     where("send").c_str());
        in_flight = true;
        break;
      }
    }
  } else {
    in_flight = !pending_sends_.empty();
  }
  if (in_flight) {
    for (PendingSend& p : pending_sends_) (void)p.data.release();
    return;
  }
  // A broken group may have requests in flight: leave it to MPI_Abort.
  if (!fin && !broken_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::reap_sends() {
  while (!pending_sends_.empty()) {
    int done = 0;
    check(MPI_Test(&pending_sends_.front().req, &done, MPI_STATUS_IGNORE), "send");
    if (!done) return;
    pending_sends_.pop_front();
  }
}

std::string MpiCommunicator::where(const char* op) const {
  return detail::concat("group ", name_, ", rank ", rank_, " of ", size_, ", op #", seq_, " ", op);
}

void MpiCommunicator::fail(const std::string& msg) {
  broken_ = true;
  MpiRuntime::get().fail_job(msg, options_.timeout_s);
  throw Error(msg);
}

void MpiCommunicator::check(int rc, const char* op) {
  if (rc == MPI_SUCCESS) [[likely]]
    return;
  try {
    mpi_check(rc, detail::concat("mpi ", op));
  } catch (const Error& e) {
    fail(detail::concat(e.what(), " (", where(op), ")"));
  }
}

std::string MpiCommunicator::blame() const {
  FailureChannel* channel = MpiRuntime::get().channel();
  if (!channel) return "a peer rank died, stalled, or called a different collective";
  // Ranks waiting in any collective answer within moments; the window only bounds the wait for
  // the ones that cannot.
  const std::vector<int> silent = channel->unresponsive(std::min(options_.timeout_s, 10.0));
  if (silent.empty())
    return "every rank of the world answered, so a peer called a different collective or waits "
           "in another group";
  std::string ranks;
  for (int r : silent) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return detail::concat("no answer from world rank", silent.size() > 1 ? "s " : " ", ranks,
                        " (dead, or stalled outside any collective)");
}

void MpiCommunicator::wait_op(MPI_Request& req, const char* op, MPI_Status* status) {
  int rc = MPI_SUCCESS;
  if (!poll(req, status, options_.timeout_s, &rc, spin_s_)) {
    FailureChannel* channel = MpiRuntime::get().channel();
    if (channel && channel->peer_failure_rank() >= 0)
      fail(detail::concat("[mpi ", op, "] aborted (", where(op), "): world rank ",
                          channel->peer_failure_rank(), " failed: ", channel->peer_failure()));
    fail(detail::concat("[mpi ", op, "] timed out after ", options_.timeout_s, " s (", where(op),
                        "): ", blame(),
                        "; set TENSORPAR_COMM_DEBUG=1 to compare calls. The MPI job cannot recover "
                        "and will be aborted"));
  }
  check(rc, op);
}

void MpiCommunicator::begin(CommOp op, DType dtype, int64_t count, ReduceOp reduce,
                            int64_t root) {
  const std::string name(comm_op_name(op));
  TP_CHECK(!broken_, "[mpi ", name, "] group ", name_, " is broken by an earlier failure (rank ",
           rank_, "); the MPI job is being aborted");
  TP_CHECK(count >= 0, "[mpi ", name, "] count: got ", count, ", expected >= 0 (", where(name.c_str()), ")");
  ++seq_;
  if (!options_.debug || size_ == 1) return;
  const OpFingerprint mine = make_fingerprint(op, dtype, count, reduce, root, seq_);
  check_fingerprints(mine, size_, name_, [&](const int64_t* in, int64_t* out) {
    MPI_Request req;
    check(MPI_Iallgather(in, int(kFingerprintWords), MPI_INT64_T, out, int(kFingerprintWords),
                         MPI_INT64_T, comm_, &req),
          name.c_str());
    wait_op(req, name.c_str());
  });
}

void MpiCommunicator::all_reduce(const void* in, void* out, int64_t count, DType dtype,
                                 ReduceOp op) {
  const MPI_Datatype type = mpi_reduce_type(dtype);
  begin(CommOp::kAllReduce, dtype, count, op);
  const int64_t esize = dtype_nbytes(dtype, 1);
  TP_CHECK(in == out || !overlap(in, count * esize, out, count * esize),
           "[mpi all_reduce] in and out overlap partially (", where("all_reduce"), ")");
  if (size_ == 1 || count == 0) {
    if (in != out) std::memcpy(out, in, size_t(count * esize));
    return;
  }
  if (is_16bit_float(dtype)) {
    scratch_.resize(size_t(count));
    widen(in, scratch_.data(), count, dtype);
  }
  // In pieces of kPipelineBytes, two in flight: OpenMPI's nonblocking all-reduce of one large
  // message runs at half the link's rate over TCP, pieces at its full rate
  // (docs/BENCHMARKS.md "Collectives").
  const int64_t piece = std::max<int64_t>(1, kPipelineBytes / (is_16bit_float(dtype) ? 4 : esize));
  MPI_Request pending[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int64_t posted = 0;
  for (int64_t off = 0; off < count; off += piece, ++posted) {
    const int n = int(std::min(piece, count - off));
    MPI_Request& req = pending[posted % 2];
    if (req != MPI_REQUEST_NULL) wait_op(req, "all_reduce");  // the piece before the last
    if (is_16bit_float(dtype)) {
      check(MPI_Iallreduce(MPI_IN_PLACE, scratch_.data() + off, n, type, mpi_op(op), comm_, &req),
            "all_reduce");
    } else {
      const void* src = in == out ? MPI_IN_PLACE : static_cast<const char*>(in) + off * esize;
      check(MPI_Iallreduce(src, static_cast<char*>(out) + off * esize, n, type, mpi_op(op), comm_,
                           &req),
            "all_reduce");
    }
  }
  for (int64_t k = posted; k < posted + 2; ++k)
    if (pending[k % 2] != MPI_REQUEST_NULL) wait_op(pending[k % 2], "all_reduce");
  if (is_16bit_float(dtype)) narrow(scratch_.data(), out, count, dtype);
}

void MpiCommunicator::all_gather(const void* in, void* out, int64_t count, DType dtype) {
  const MPI_Datatype type = mpi_move_type(dtype);
  begin(CommOp::kAllGather, dtype, count);
  const int64_t esize = dtype_nbytes(dtype, 1);
  const int64_t bytes = count * esize;
  TP_CHECK(count <= INT_MAX, "[mpi all_gather] count: got ", count, ", expected <= ", INT_MAX);
  const void* own_slot = static_cast<const char*>(out) + rank_ * bytes;
  const bool in_place = in == own_slot;
  TP_CHECK(in_place || !overlap(in, bytes, out, bytes * size_),
           "[mpi all_gather] in overlaps out but is not out + rank*count (", where("all_gather"),
           ")");
  if (count == 0) return;
  if (size_ == 1) {
    if (!in_place) std::memcpy(out, in, size_t(bytes));
    return;
  }
  MPI_Request req;
  check(MPI_Iallgather(in_place ? MPI_IN_PLACE : in, int(count), type, out, int(count), type,
                       comm_, &req),
        "all_gather");
  wait_op(req, "all_gather");
}

void MpiCommunicator::reduce_scatter(const void* in, void* out, int64_t count, DType dtype,
                                     ReduceOp op) {
  const MPI_Datatype type = mpi_reduce_type(dtype);
  begin(CommOp::kReduceScatter, dtype, count, op);
  const int64_t esize = dtype_nbytes(dtype, 1);
  const int64_t bytes = count * esize;
  TP_CHECK(count <= INT_MAX / size_, "[mpi reduce_scatter] count: got ", count,
           ", expected <= ", INT_MAX / size_);
  if (count == 0) return;
  if (size_ == 1) {
    if (in != out) std::memmove(out, in, size_t(bytes));
    return;
  }
  const int64_t total = count * size_;
  MPI_Request req;
  if (is_16bit_float(dtype)) {
    scratch_.resize(size_t(total));
    widen(in, scratch_.data(), total, dtype);
    check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, scratch_.data(), int(count), type, mpi_op(op),
                                    comm_, &req),
          "reduce_scatter");
    wait_op(req, "reduce_scatter");
    narrow(scratch_.data(), out, count, dtype);
    return;
  }
  if (in == out) {  // MPI's in-place form: the result lands in the first count elements
    check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, out, int(count), type, mpi_op(op), comm_, &req),
          "reduce_scatter");
    wait_op(req, "reduce_scatter");
    return;
  }
  if (!overlap(in, total * esize, out, bytes)) {
    check(MPI_Ireduce_scatter_block(in, out, int(count), type, mpi_op(op), comm_, &req),
          "reduce_scatter");
    wait_op(req, "reduce_scatter");
    return;
  }
  // out inside in (e.g. NCCL's in-place form, out = in + rank*count): reduce into staging.
  scratch_bytes_.resize(size_t(bytes));
  check(MPI_Ireduce_scatter_block(in, scratch_bytes_.data(), int(count), type, mpi_op(op), comm_,
                                  &req),
        "reduce_scatter");
  wait_op(req, "reduce_scatter");
  std::memcpy(out, scratch_bytes_.data(), size_t(bytes));
}

void MpiCommunicator::broadcast(void* data, int64_t count, DType dtype, int root) {
  const MPI_Datatype type = mpi_move_type(dtype);
  TP_CHECK(root >= 0 && root < size_, "[mpi broadcast] root: got ", root, ", expected in [0, ",
           size_, ") (group ", name_, ")");
  begin(CommOp::kBroadcast, dtype, count, ReduceOp::kSum, root);
  if (size_ == 1) return;
  const int64_t esize = dtype_nbytes(dtype, 1);
  for (int64_t off = 0; off < count; off += kMaxChunk) {
    const int n = int(std::min(kMaxChunk, count - off));
    MPI_Request req;
    check(MPI_Ibcast(static_cast<char*>(data) + off * esize, n, type, root, comm_, &req),
          "broadcast");
    wait_op(req, "broadcast");
  }
}

void MpiCommunicator::check_all_to_all_counts(std::span<const int64_t> send_counts,
                                              std::span<const int64_t> recv_counts) {
  // Every rank sees the whole count matrix, so all of them agree on the verdict (none is left
  // waiting in the exchange): rank i's send_counts[r] must be rank r's recv_counts[i].
  const size_t n = static_cast<size_t>(size_);
  std::vector<int64_t> mine(2 * n), all(2 * n * n);
  std::copy(send_counts.begin(), send_counts.end(), mine.begin());
  std::copy(recv_counts.begin(), recv_counts.end(), mine.begin() + std::ptrdiff_t(n));
  MPI_Request req;
  check(MPI_Iallgather(mine.data(), 2 * size_, MPI_INT64_T, all.data(), 2 * size_, MPI_INT64_T,
                       comm_, &req),
        "all_to_all");
  wait_op(req, "all_to_all");
  for (size_t i = 0; i < n; ++i)
    for (size_t r = 0; r < n; ++r) {
      const int64_t sent = all[i * 2 * n + r], expected = all[r * 2 * n + n + i];
      TP_CHECK(sent == expected, "[mpi all_to_all] count mismatch on group ", name_,
               " (TENSORPAR_COMM_DEBUG): rank ", i, " sends ", sent, " elements to rank ", r,
               ", which expects ", expected);
    }
}

void MpiCommunicator::all_to_all(const void* in, std::span<const int64_t> send_counts, void* out,
                                 std::span<const int64_t> recv_counts, DType dtype) {
  const MPI_Datatype type = mpi_move_type(dtype);
  TP_CHECK(int64_t(send_counts.size()) == size_ && int64_t(recv_counts.size()) == size_,
           "[mpi all_to_all] counts: got ", send_counts.size(), " send and ", recv_counts.size(),
           " recv counts, expected ", size_, " each (group ", name_, ")");
  const size_t n = static_cast<size_t>(size_);
  std::vector<int> scount(n), sdispl(n), rcount(n), rdispl(n);
  int64_t stotal = 0, rtotal = 0;
  for (size_t r = 0; r < size_t(size_); ++r) {
    TP_CHECK(send_counts[r] >= 0 && recv_counts[r] >= 0, "[mpi all_to_all] counts for rank ", r,
             ": got send ", send_counts[r], ", recv ", recv_counts[r], ", expected >= 0");
    sdispl[r] = int(stotal);
    rdispl[r] = int(rtotal);
    scount[r] = int(send_counts[r]);
    rcount[r] = int(recv_counts[r]);
    stotal += send_counts[r];
    rtotal += recv_counts[r];
    TP_CHECK(stotal <= INT_MAX && rtotal <= INT_MAX, "[mpi all_to_all] total count exceeds ",
             INT_MAX, " elements (group ", name_, ")");
  }
  begin(CommOp::kAllToAll, dtype, size_);
  if (options_.debug && size_ > 1) check_all_to_all_counts(send_counts, recv_counts);
  const int64_t esize = dtype_nbytes(dtype, 1);
  if (size_ == 1) {
    TP_CHECK(stotal == rtotal, "[mpi all_to_all] a group of one sends ", stotal,
             " elements to itself but expects ", rtotal);
    if (in != out) std::memmove(out, in, size_t(stotal * esize));
    return;
  }
  const void* src = in;
  if (overlap(in, stotal * esize, out, rtotal * esize)) {  // in place: stage the input
    scratch_bytes_.assign(static_cast<const uint8_t*>(in),
                          static_cast<const uint8_t*>(in) + stotal * esize);
    src = scratch_bytes_.data();
  }
  MPI_Request req;
  check(MPI_Ialltoallv(src, scount.data(), sdispl.data(), type, out, rcount.data(), rdispl.data(),
                       type, comm_, &req),
        "all_to_all");
  wait_op(req, "all_to_all");
}

void MpiCommunicator::send(const void* data, int64_t count, DType dtype, int peer) {
  const MPI_Datatype type = mpi_move_type(dtype);
  TP_CHECK(peer >= 0 && peer < size_ && peer != rank_, "[mpi send] peer: got ", peer,
           ", expected another rank in [0, ", size_, ") (group ", name_, ", rank ", rank_, ")");
  TP_CHECK(count >= 0 && count <= INT_MAX, "[mpi send] count: got ", count, ", expected in [0, ",
           INT_MAX, "]");
  TP_CHECK(!broken_, "[mpi send] group ", name_, " is broken by an earlier failure");
  // Eager, as the threads backend: the data is copied and the send left in flight, so a send
  // never waits for its receive (a pipeline's ring of stages cannot deadlock on it). Messages to
  // one peer keep their order (MPI's non-overtaking rule); a dead peer is noticed by the next
  // blocking operation's timeout or the failure channel.
  reap_sends();
  const size_t bytes = size_t(dtype_nbytes(dtype, count));
  PendingSend p{MPI_REQUEST_NULL, std::unique_ptr<std::byte[]>(new std::byte[std::max<size_t>(bytes, 1)])};
  if (bytes > 0) std::memcpy(p.data.get(), data, bytes);
  check(MPI_Isend(p.data.get(), int(count), type, peer, kTagP2p, comm_, &p.req), "send");
  pending_sends_.push_back(std::move(p));
}

void MpiCommunicator::recv(void* data, int64_t count, DType dtype, int peer) {
  const MPI_Datatype type = mpi_move_type(dtype);
  TP_CHECK(peer >= 0 && peer < size_ && peer != rank_, "[mpi recv] peer: got ", peer,
           ", expected another rank in [0, ", size_, ") (group ", name_, ", rank ", rank_, ")");
  TP_CHECK(count >= 0 && count <= INT_MAX, "[mpi recv] count: got ", count, ", expected in [0, ",
           INT_MAX, "]");
  TP_CHECK(!broken_, "[mpi recv] group ", name_, " is broken by an earlier failure");
  MPI_Request req;
  MPI_Status status;
  check(MPI_Irecv(data, int(count), type, peer, kTagP2p, comm_, &req), "recv");
  wait_op(req, "recv", &status);
  int got = 0;
  check(MPI_Get_count(&status, type, &got), "recv");
  TP_CHECK(got == count, "[mpi recv] got ", got, " elements from rank ", peer, ", expected ",
           count, " (group ", name_, ", rank ", rank_, ")");
}

void MpiCommunicator::barrier() {
  begin(CommOp::kBarrier, DType::kU8, 0);
  if (size_ == 1) return;
  MPI_Request req;
  check(MPI_Ibarrier(comm_, &req), "barrier");
  wait_op(req, "barrier");
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  TP_CHECK(color >= 0, "[mpi split] color: got ", color, ", expected >= 0 (group ", name_, ")");
  begin(CommOp::kSplit, DType::kI32, 0);
  // MPI_Comm_split has no nonblocking form: first meet every rank under the timeout, so the
  // blocking split only runs when all are present (and a watchdog bounds it anyway).
  if (size_ > 1) {
    MPI_Request req;
    check(MPI_Ibarrier(comm_, &req), "split");
    wait_op(req, "split");
  }
  MPI_Comm child = MPI_COMM_NULL;
  int rc = MPI_SUCCESS;
  MpiRuntime::get().run_with_watchdog("[mpi split] MPI_Comm_split (" + where("split") + ")",
                                      options_.timeout_s,
                                      [&] { rc = MPI_Comm_split(comm_, color, key, &child); });
  check(rc, "split");
  return std::make_unique<MpiCommunicator>(child, detail::concat(name_, "/", color), options_);
}

}  // namespace tensorpar::mpi
