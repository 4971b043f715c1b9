// Collectives of the threads backend. Every op is one "phase": a rank publishes its descriptor
// (and, for small messages, a copy of its input in its staging buffer), all ranks sync, each
// checks the others called the same op, then moves data. Direct (large) ops sync once more at
// the end, since peers read this rank's buffers in place; staged ops do not need to, because
// descriptors and staging are double-buffered and the next phase's sync orders the reuse.
#include "comm/threads/threads_communicator.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "comm/threads/reduce_kernels.h"
#include "comm/threads/threads_backend.h"
#include "core/error.h"
#include "core/threading.h"

namespace tensorpar::threads {

namespace {

constexpr int kMaxRanks = 1024;

int64_t elem_bytes(DType dtype) {
  TP_CHECK(!dtype_is_quantized(dtype), "[threads] dtype ", dtype_name(dtype),
           " cannot be communicated element-wise, expected a plain type");
  return dtype_block_bytes(dtype);
}

void check_reducible(const char* where, DType dtype) {
  TP_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16 ||
               dtype == DType::kI32 || dtype == DType::kI64,
           "[", where, "] dtype ", dtype_name(dtype), " cannot be reduced, expected f32|bf16|f16|i32|i64");
}

void check_buffer(const char* where, const void* p, int64_t count, const char* what) {
  TP_CHECK(count >= 0, "[", where, "] count: got ", count, ", expected >= 0");
  TP_CHECK(count == 0 || p != nullptr, "[", where, "] ", what, " is null with count ", count);
}

// [begin, end) of `count` elements owned by `r` of `n`, cut at cache-line boundaries so ranks
// never write the same line.
std::pair<int64_t, int64_t> slice_of(int64_t count, int64_t elem, int r, int n) {
  const int64_t unit = std::max<int64_t>(1, 64 / elem);
  const int64_t units = (count + unit - 1) / unit;
  const int64_t b = units * r / n * unit;
  const int64_t e = std::min(count, units * (r + 1) / n * unit);
  return {std::min(b, count), e};
}

inline const std::byte* at(const void* p, int64_t off) { return static_cast<const std::byte*>(p) + off; }
inline std::byte* at(void* p, int64_t off) { return static_cast<std::byte*>(p) + off; }

void copy_if_distinct(void* dst, const void* src, int64_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, size_t(bytes));
}

// The peers' staged lines sit dirty in their caches; asking for all of them at once overlaps
// the cross-core transfers instead of paying their latency one by one.
void prefetch_lines(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, 3);
}

// Spinning only pays when every rank has a core of its own.
int spin_iters_for(int n_world) {
  return n_world <= int(available_cpus().size()) ? 4000 : 64;
}

ThreadsCommunicator& as_threads(Communicator& comm, const char* where) {
  auto* t = dynamic_cast<ThreadsCommunicator*>(&comm);
  TP_CHECK(t != nullptr, "[", where, "] ", comm.name(), " is not a threads communicator");
  return *t;
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> create_world(int n_ranks, const CommOptions& options) {
  TP_CHECK(n_ranks >= 1 && n_ranks <= kMaxRanks, "[threads::create_world] n_ranks: got ", n_ranks,
           ", expected 1..", kMaxRanks);
  TP_CHECK(options.timeout_s > 0, "[threads::create_world] timeout_s: got ", options.timeout_s,
           ", expected > 0");
  auto abort = std::make_shared<AbortState>(n_ranks);
  std::vector<int> world_ranks(static_cast<size_t>(n_ranks));
  for (int r = 0; r < n_ranks; ++r) world_ranks[size_t(r)] = r;
  auto group = std::make_shared<GroupState>(abort, std::move(world_ranks), "threads:world", options,
                                            spin_iters_for(n_ranks));
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < n_ranks; ++r) comms.push_back(std::make_unique<ThreadsCommunicator>(group, r));
  return comms;
}

void abort_world(Communicator& comm, const std::string& reason) {
  ThreadsCommunicator& t = as_threads(comm, "threads::abort_world");
  t.group().abort_state()->abort(t.world_rank(), reason);
}

bool is_aborted(Communicator& comm) {
  return as_threads(comm, "threads::is_aborted").group().abort_state()->aborted();
}

bool others_exited(Communicator& comm) {
  ThreadsCommunicator& t = as_threads(comm, "threads::others_exited");
  const AbortState& a = *t.group().abort_state();
  for (int r = 0; r < a.n_world(); ++r)
    if (r != t.world_rank() && !a.exited(r)) return false;
  return true;
}

void mark_exited(Communicator& comm) {
  ThreadsCommunicator& t = as_threads(comm, "threads::mark_exited");
  t.group().abort_state()->mark_exited(t.world_rank());
}

ThreadsCommunicator::ThreadsCommunicator(std::shared_ptr<GroupState> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  ctx_.rank = rank;
}

OpDesc& ThreadsCommunicator::begin(CommOp op, DType dtype, int64_t count, ReduceOp reduce, int64_t root) {
  ++seq_;
  ctx_ = WaitContext{op, seq_, rank_};
  group_->throw_if_aborted(ctx_);
  const OpFingerprint fp = make_fingerprint(op, dtype, count, reduce, root, seq_);
  if (group_->options().debug && size() > 1) {
    check_fingerprints(fp, size(), name(),
                       [&](const int64_t* in, int64_t* out) { raw_gather(in, out, kFingerprintWords * 8); });
  }
  parity_ = int(phase_++ & 1);
  OpDesc& d = group_->desc(rank_, parity_);
  d.fp = fp;
  d.in = nullptr;
  d.out = nullptr;
  d.send_counts = d.recv_counts = nullptr;
  return d;
}

void ThreadsCommunicator::sync(bool drain) {
  ++gen_;
  group_->arrive(rank_, gen_);
  const int n = size();
  // Start with the next rank so that waiters do not all poll rank 0's line first.
  for (int i = 1; i < n; ++i) group_->wait_for((rank_ + i) % n, gen_, ctx_, drain);
}

void ThreadsCommunicator::commit_sync() {
  ++gen_;
  ++commits_;
  group_->commit_sync(rank_, gen_, commits_, ctx_);
}

void ThreadsCommunicator::check_descs() {
  const int n = size();
  const OpFingerprint& fp0 = peer_desc(0).fp;
  for (int r = 1; r < n; ++r) {
    if (!(peer_desc(r).fp == fp0)) {
      std::vector<OpFingerprint> all;
      for (int q = 0; q < n; ++q) all.push_back(peer_desc(q).fp);
      verify_fingerprints(all, comm_op_name(ctx_.op), name());
    }
  }
}

void ThreadsCommunicator::raw_gather(const void* in, void* out, int64_t bytes) {
  const int p = int(phase_++ & 1);
  std::memcpy(group_->staging(rank_, p), in, size_t(bytes));
  sync();
  for (int r = 0; r < size(); ++r) std::memcpy(at(out, r * bytes), group_->staging(r, p), size_t(bytes));
}

void ThreadsCommunicator::all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) {
  check_reducible("all_reduce", dtype);
  check_buffer("all_reduce", in, count, "in");
  check_buffer("all_reduce", out, count, "out");
  const int64_t elem = elem_bytes(dtype);
  const int64_t bytes = count * elem;
  const int n = size();
  if (n == 1) {
    copy_if_distinct(out, in, bytes);
    return;
  }
  OpDesc& d = begin(CommOp::kAllReduce, dtype, count, op, -1);
  std::vector<const void*> srcs(static_cast<size_t>(n));
  if (bytes <= GroupState::kOneShotBytes) {
    // One-shot: every rank reduces everything itself, from the peers' staged copies.
    std::memcpy(group_->staging(rank_, parity_), in, size_t(bytes));
    sync();
    check_descs();
    for (int r = 0; r < n; ++r) srcs[size_t(r)] = r == rank_ ? in : group_->staging(r, parity_);
    for (int r = 0; r < n; ++r)
      if (r != rank_) prefetch_lines(srcs[size_t(r)], bytes);
    reduce_range(dtype, op, srcs.data(), n, &out, 1, 0, count);
    return;
  }
  d.in = in;
  d.out = out;
  commit_sync();
  check_descs();
  std::vector<void*> dsts(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    srcs[size_t(r)] = peer_desc(r).in;
    dsts[size_t(r)] = peer_desc((rank_ + r) % n).out;  // own output first, then the next ranks'
  }
  const auto [b, e] = slice_of(count, elem, rank_, n);
  // Non-temporal output stores pay only out of place: in place, the reduce just read those lines.
  bool stream = bytes >= GroupState::kStreamBytes;
  for (int r = 0; r < n; ++r) stream = stream && peer_desc(r).in != peer_desc(r).out;
  reduce_range(dtype, op, srcs.data(), n, dsts.data(), n, b, e, stream);
  sync(/*drain=*/true);
}

void ThreadsCommunicator::all_gather(const void* in, void* out, int64_t count, DType dtype) {
  check_buffer("all_gather", in, count, "in");
  check_buffer("all_gather", out, count, "out");
  const int64_t bytes = count * elem_bytes(dtype);
  const int n = size();
  void* mine = at(out, rank_ * bytes);
  if (n == 1) {
    copy_if_distinct(mine, in, bytes);
    return;
  }
  OpDesc& d = begin(CommOp::kAllGather, dtype, count, ReduceOp::kSum, -1);
  const bool staged = bytes <= GroupState::kStagingBytes;
  if (staged) {
    std::memcpy(group_->staging(rank_, parity_), in, size_t(bytes));
  } else {
    d.in = in;
  }
  if (staged) {
    sync();
  } else {
    commit_sync();
  }
  check_descs();
  for (int i = 1; i < n; ++i) {
    const int r = (rank_ + i) % n;
    const void* src = staged ? group_->staging(r, parity_) : peer_desc(r).in;
    std::memcpy(at(out, r * bytes), src, size_t(bytes));
  }
  copy_if_distinct(mine, in, bytes);  // after the peers' parts: `in` may lie inside `out`
  if (!staged) sync(/*drain=*/true);
}

void ThreadsCommunicator::reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) {
  check_reducible("reduce_scatter", dtype);
  check_buffer("reduce_scatter", in, count, "in");
  check_buffer("reduce_scatter", out, count, "out");
  const int64_t bytes = count * elem_bytes(dtype);
  const int n = size();
  if (n == 1) {
    copy_if_distinct(out, in, bytes);
    return;
  }
  OpDesc& d = begin(CommOp::kReduceScatter, dtype, count, op, -1);
  const bool staged = bytes * n <= GroupState::kStagingBytes;
  if (staged) {
    std::memcpy(group_->staging(rank_, parity_), in, size_t(bytes * n));
  } else {
    d.in = in;
  }
  if (staged) {
    sync();
  } else {
    commit_sync();
  }
  check_descs();
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const void* base = r == rank_ ? in : staged ? group_->staging(r, parity_) : peer_desc(r).in;
    srcs[size_t(r)] = at(base, rank_ * bytes);
  }
  reduce_range(dtype, op, srcs.data(), n, &out, 1, 0, count);
  if (!staged) sync(/*drain=*/true);
}

void ThreadsCommunicator::broadcast(void* data, int64_t count, DType dtype, int root) {
  check_buffer("broadcast", data, count, "data");
  const int n = size();
  TP_CHECK(root >= 0 && root < n, "[broadcast] root: got ", root, ", expected 0..", n - 1, " on ", name());
  const int64_t bytes = count * elem_bytes(dtype);
  if (n == 1) return;
  OpDesc& d = begin(CommOp::kBroadcast, dtype, count, ReduceOp::kSum, root);
  const bool staged = bytes <= GroupState::kStagingBytes;
  if (rank_ == root) {
    if (staged) {
      std::memcpy(group_->staging(rank_, parity_), data, size_t(bytes));
    } else {
      d.in = data;
    }
  }
  if (staged) {
    sync();
  } else {
    commit_sync();
  }
  check_descs();
  if (rank_ != root) {
    const void* src = staged ? group_->staging(root, parity_) : peer_desc(root).in;
    std::memcpy(data, src, size_t(bytes));
  }
  if (!staged) sync(/*drain=*/true);
}

void ThreadsCommunicator::all_to_all(const void* in, std::span<const int64_t> send_counts, void* out,
                                     std::span<const int64_t> recv_counts, DType dtype) {
  const int n = size();
  TP_CHECK(int64_t(send_counts.size()) == n && int64_t(recv_counts.size()) == n,
           "[all_to_all] counts: got ", send_counts.size(), " send and ", recv_counts.size(),
           " recv counts, expected ", n, " (the size of ", name(), ")");
  int64_t send_total = 0, recv_total = 0;
  for (int r = 0; r < n; ++r) {
    TP_CHECK(send_counts[size_t(r)] >= 0 && recv_counts[size_t(r)] >= 0,
             "[all_to_all] negative count for rank ", r);
    send_total += send_counts[size_t(r)];
    recv_total += recv_counts[size_t(r)];
  }
  check_buffer("all_to_all", in, send_total, "in");
  check_buffer("all_to_all", out, recv_total, "out");
  const int64_t elem = elem_bytes(dtype);
  if (n == 1) {
    TP_CHECK(send_counts[0] == recv_counts[0], "[all_to_all] rank 0 sends ", send_counts[0],
             " elements to itself but expects ", recv_counts[0]);
    copy_if_distinct(out, in, send_counts[0] * elem);
    return;
  }
  OpDesc& d = begin(CommOp::kAllToAll, dtype, -1, ReduceOp::kSum, -1);
  d.in = in;
  d.out = out;
  d.send_counts = send_counts.data();
  d.recv_counts = recv_counts.data();
  commit_sync();
  check_descs();
  // Every rank checks the whole matrix (so all agree); the counts live in the callers' memory,
  // hence the drain sync before anyone throws.
  std::string problem;
  for (int s = 0; s < n && problem.empty(); ++s) {
    for (int t = 0; t < n && problem.empty(); ++t) {
      const int64_t sent = peer_desc(s).send_counts[t], expected = peer_desc(t).recv_counts[s];
      if (sent != expected)
        problem = tensorpar::detail::concat("[all_to_all] counts disagree on ", name(), ": rank ", s, " sends ", sent,
                                 " elements to rank ", t, " but rank ", t, " expects ", expected);
    }
  }
  if (!problem.empty()) {
    sync(/*drain=*/true);
    throw Error(problem);
  }
  int64_t out_off = 0;
  std::vector<int64_t> out_offsets(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s) {
    out_offsets[size_t(s)] = out_off;
    out_off += recv_counts[size_t(s)];
  }
  for (int i = 0; i < n; ++i) {
    const int s = (rank_ + i) % n;
    const OpDesc& src = peer_desc(s);
    int64_t in_off = 0;
    for (int t = 0; t < rank_; ++t) in_off += src.send_counts[t];
    const int64_t m = src.send_counts[rank_];
    if (m > 0) std::memcpy(at(out, out_offsets[size_t(s)] * elem), at(src.in, in_off * elem), size_t(m * elem));
  }
  sync(/*drain=*/true);
}

void ThreadsCommunicator::send(const void* data, int64_t count, DType dtype, int peer) {
  const int n = size();
  TP_CHECK(peer >= 0 && peer < n, "[send] peer: got ", peer, ", expected 0..", n - 1, " on ", name());
  check_buffer("send", data, count, "data");
  const int64_t bytes = count * elem_bytes(dtype);
  group_->throw_if_aborted(WaitContext{CommOp::kSend, seq_, rank_});
  Message m{dtype, count, std::unique_ptr<std::byte[]>(new std::byte[size_t(std::max<int64_t>(bytes, 1))])};
  if (bytes > 0) std::memcpy(m.data.get(), data, size_t(bytes));
  Mailbox& box = group_->mailbox(rank_, peer);
  {
    std::lock_guard<std::mutex> lock(box.mutex);
    box.queue.push_back(std::move(m));
  }
  box.ready.notify_all();
}

void ThreadsCommunicator::recv(void* data, int64_t count, DType dtype, int peer) {
  const int n = size();
  TP_CHECK(peer >= 0 && peer < n, "[recv] peer: got ", peer, ", expected 0..", n - 1, " on ", name());
  check_buffer("recv", data, count, "data");
  const int64_t bytes = count * elem_bytes(dtype);
  const WaitContext ctx{CommOp::kRecv, seq_, rank_};
  group_->throw_if_aborted(ctx);
  Message m = group_->receive(peer, rank_, ctx);
  TP_CHECK(m.dtype == dtype && m.count == count, "[recv] rank ", rank_, " of ", name(), " called recv(",
           dtype_name(dtype), ", ", count, ") from rank ", peer, " but rank ", peer, " called send(",
           dtype_name(m.dtype), ", ", m.count, ")");
  if (bytes > 0) std::memcpy(data, m.data.get(), size_t(bytes));
}

void ThreadsCommunicator::barrier() {
  if (size() == 1) return;
  begin(CommOp::kBarrier, DType::kF32, 0, ReduceOp::kSum, -1);
  sync();
  check_descs();
}

std::unique_ptr<Communicator> ThreadsCommunicator::split(int color, int key) {
  const int n = size();
  const std::string child_name = name() + "/" + std::to_string(color);
  if (n == 1) {
    if (color < 0) return nullptr;
    auto g = std::make_shared<GroupState>(group_->abort_state(), std::vector<int>{world_rank()}, child_name,
                                          group_->options(), group_->spin_iters());
    return std::make_unique<ThreadsCommunicator>(std::move(g), 0);
  }
  OpDesc& d = begin(CommOp::kSplit, DType::kF32, 0, ReduceOp::kSum, -1);
  d.color = color;
  d.key = key;
  d.new_group.reset();
  sync();
  check_descs();
  // Members of my color ordered by (key, old rank); the lowest old rank builds the group state.
  std::vector<std::pair<int, int>> members;
  for (int r = 0; r < n; ++r)
    if (peer_desc(r).color == color) members.emplace_back(peer_desc(r).key, r);
  std::sort(members.begin(), members.end());
  int leader = n;
  for (const auto& m : members) leader = std::min(leader, m.second);
  if (color >= 0 && leader == rank_) {
    std::vector<int> world_ranks;
    for (const auto& m : members) world_ranks.push_back(group_->world_rank(m.second));
    d.new_group = std::make_shared<GroupState>(group_->abort_state(), std::move(world_ranks), child_name,
                                               group_->options(), group_->spin_iters());
  }
  sync();
  std::shared_ptr<GroupState> child;
  int child_rank = -1;
  if (color >= 0) {
    child = peer_desc(leader).new_group;
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i].second == rank_) child_rank = int(i);
  }
  sync();
  if (leader == rank_) d.new_group.reset();
  if (color < 0) return nullptr;
  TP_ASSERT(child && child_rank >= 0, "split lost its group");
  return std::make_unique<ThreadsCommunicator>(std::move(child), child_rank);
}

}  // namespace tensorpar::threads
