// HierarchicalCommunicator: two-level collectives over a local (one host) and a cross (one rank
// per host) group; see the header for the algorithms.
#include "comm/hybrid/hierarchical_communicator.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/half.h"

namespace tensorpar {

namespace {

bool is_16bit_float(DType t) { return t == DType::kBF16 || t == DType::kF16; }

// The type the two levels reduce in: f32 for 16-bit floats (rounded once at the end).
DType work_type(DType t) { return is_16bit_float(t) ? DType::kF32 : t; }

// dst (work type) = src (dtype), n elements.
void load(const void* src, void* dst, int64_t n, DType dtype) {
  if (!is_16bit_float(dtype)) {
    std::memmove(dst, src, size_t(dtype_nbytes(dtype, n)));
    return;
  }
  const uint16_t* s = static_cast<const uint16_t*>(src);
  float* d = static_cast<float*>(dst);
  if (dtype == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(bf16{s[i]});
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = f16_to_f32(f16{s[i]});
  }
}

// dst (dtype) = src (work type), n elements.
void store(const void* src, void* dst, int64_t n, DType dtype) {
  if (!is_16bit_float(dtype)) {
    std::memmove(dst, src, size_t(dtype_nbytes(dtype, n)));
    return;
  }
  const float* s = static_cast<const float*>(src);
  uint16_t* d = static_cast<uint16_t*>(dst);
  if (dtype == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]).bits;
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(s[i]).bits;
  }
}

// acc[i] = acc[i] op x[i] for n elements of the work type t.
template <typename T>
void combine_as(void* acc, const void* x, int64_t n, ReduceOp op) {
  T* a = static_cast<T*>(acc);
  const T* b = static_cast<const T*>(x);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = op == ReduceOp::kSum ? T(a[i] + b[i]) : op == ReduceOp::kMax ? std::max(a[i], b[i]) : std::min(a[i], b[i]);
  }
}

void combine(void* acc, const void* x, int64_t n, DType t, ReduceOp op) {
  switch (t) {
    case DType::kF32: return combine_as<float>(acc, x, n, op);
    case DType::kI32: return combine_as<int32_t>(acc, x, n, op);
    case DType::kI64: return combine_as<int64_t>(acc, x, n, op);
    case DType::kU8: return combine_as<uint8_t>(acc, x, n, op);
    default: TP_CHECK(false, "[hybrid] cannot reduce ", dtype_name(t));
  }
}

uint8_t* bytes_of(std::vector<uint8_t>& v, int64_t n) {
  if (v.size() < size_t(n)) v.resize(size_t(n));
  return v.data();
}

}  // namespace

std::unique_ptr<Communicator> make_hierarchical(std::unique_ptr<Communicator> group, int64_t host_id) {
  TP_CHECK(group != nullptr, "[make_hierarchical] no group");
  const int n = group->size(), me = group->rank();
  std::vector<int64_t> ids(static_cast<size_t>(n));
  group->all_gather(&host_id, ids.data(), 1, DType::kI64);
  // Hosts in the order of their lowest rank; each rank's index within its host by old rank.
  std::map<int64_t, int> host_index;
  std::vector<int> ranks_on;  // per host index
  for (int r = 0; r < n; ++r) {
    auto [it, added] = host_index.emplace(ids[size_t(r)], int(ranks_on.size()));
    if (added) ranks_on.push_back(0);
    ++ranks_on[size_t(it->second)];
  }
  const int my_host = host_index.at(host_id);
  int local_index = 0;
  for (int r = 0; r < me; ++r) local_index += ids[size_t(r)] == host_id;
  int new_rank = local_index;
  for (int h = 0; h < my_host; ++h) new_rank += ranks_on[size_t(h)];
  const int hosts = int(ranks_on.size());
  const int per_host = ranks_on[0];
  const bool even = std::all_of(ranks_on.begin(), ranks_on.end(), [&](int c) { return c == per_host; });

  std::unique_ptr<Communicator> flat = group->split(0, new_rank);
  if (!even || hosts == 1 || per_host == 1) return flat;
  std::unique_ptr<Communicator> local = flat->split(my_host, new_rank);
  std::unique_ptr<Communicator> cross = flat->split(local_index, new_rank);
  return std::make_unique<HierarchicalCommunicator>(std::move(flat), std::move(local), std::move(cross),
                                                    host_id);
}

HierarchicalCommunicator::HierarchicalCommunicator(std::unique_ptr<Communicator> flat,
                                                   std::unique_ptr<Communicator> local,
                                                   std::unique_ptr<Communicator> cross, int64_t host_id)
    : flat_(std::move(flat)), local_(std::move(local)), cross_(std::move(cross)), host_id_(host_id) {
  TP_CHECK(flat_ && local_ && cross_, "[HierarchicalCommunicator] a group is missing");
  TP_CHECK(flat_->size() == local_->size() * cross_->size() &&
               flat_->rank() == cross_->rank() * local_->size() + local_->rank(),
           "[HierarchicalCommunicator] rank ", flat_->rank(), " of ", flat_->size(),
           " is not host-major: local rank ", local_->rank(), " of ", local_->size(), ", host ",
           cross_->rank(), " of ", cross_->size());
}

std::string HierarchicalCommunicator::name() const {
  return "hybrid[" + std::to_string(hosts()) + " hosts x " + std::to_string(ranks_per_host()) +
         "]:" + flat_->name();
}

void HierarchicalCommunicator::all_reduce(const void* in, void* out, int64_t count, DType dtype,
                                          ReduceOp op) {
  TP_CHECK(count >= 0, "[hybrid all_reduce] count: got ", count, " (", name(), ")");
  if (count == 0) return;
  if (dtype_nbytes(dtype, count) < kTwoLevelMinBytes) return flat_->all_reduce(in, out, count, dtype, op);
  const DType wt = work_type(dtype);
  const int64_t L = local_->size(), H = cross_->size();
  // Shards of a multiple of H elements (the last padded): each host reduces one H-th of a shard.
  const int64_t shard = (count + L * H - 1) / (L * H) * H, piece = shard / H;
  uint8_t* work = bytes_of(work_, dtype_nbytes(wt, shard * L));
  uint8_t* part = bytes_of(gathered_, dtype_nbytes(wt, shard + shard));  // the shard, then H pieces
  uint8_t* pieces = part + dtype_nbytes(wt, shard);
  load(in, work, count, dtype);
  std::memset(work + dtype_nbytes(wt, count), 0, size_t(dtype_nbytes(wt, shard * L - count)));
  local_->reduce_scatter(work, part, shard, wt, op);
  reduce_scatter_across(part, pieces, piece, wt, op);  // this host's piece of the shard, reduced
  cross_->all_gather(pieces, part, piece, wt);
  local_->all_gather(part, work, shard, wt);
  store(work, out, count, dtype);
}

void HierarchicalCommunicator::reduce_scatter(const void* in, void* out, int64_t count, DType dtype,
                                              ReduceOp op) {
  TP_CHECK(count >= 0, "[hybrid reduce_scatter] count: got ", count, " (", name(), ")");
  if (count == 0) return;
  const DType wt = work_type(dtype);
  const int64_t L = local_->size(), H = cross_->size();
  const int64_t in_chunk = dtype_nbytes(dtype, count), work_chunk = dtype_nbytes(wt, count);
  // Slot j of the local reduce_scatter holds the chunks of every host's local index j.
  uint8_t* work = bytes_of(work_, work_chunk * L * H);
  for (int64_t j = 0; j < L; ++j) {
    for (int64_t h = 0; h < H; ++h) {
      load(static_cast<const uint8_t*>(in) + (h * L + j) * in_chunk, work + (j * H + h) * work_chunk,
           count, dtype);
    }
  }
  uint8_t* mine = bytes_of(gathered_, work_chunk * (H + H));
  local_->reduce_scatter(work, mine, H * count, wt, op);  // this host's sums for local index i
  uint8_t* result = mine + work_chunk * H;
  reduce_scatter_across(mine, result, count, wt, op);
  store(result, out, count, dtype);
}

void HierarchicalCommunicator::reduce_scatter_across(void* in, void* out, int64_t count, DType wt,
                                                     ReduceOp op) {
  // Each host's chunk goes to that host (one all_to_all: each byte crosses the network once),
  // which reduces the H partial chunks it receives in host order: the same sum on every rank
  // that later copies it. (MPI's own reduce_scatter and all_reduce between two processes ran at
  // a third to a half of the link rate over TCP; its all_to_all and all_gather at the link rate.)
  const int64_t H = cross_->size();
  const int64_t chunk = dtype_nbytes(wt, count);
  uint8_t* received = bytes_of(received_, chunk * H);
  const std::vector<int64_t> counts(static_cast<size_t>(H), count);
  cross_->all_to_all(in, counts, received, counts, wt);
  std::memcpy(out, received, size_t(chunk));
  for (int64_t h = 1; h < H; ++h) combine(out, received + h * chunk, count, wt, op);
}

void HierarchicalCommunicator::all_gather(const void* in, void* out, int64_t count, DType dtype) {
  TP_CHECK(count >= 0, "[hybrid all_gather] count: got ", count, " (", name(), ")");
  if (count == 0) return;
  const int64_t L = local_->size(), H = cross_->size();
  const int64_t chunk = dtype_nbytes(dtype, count);
  uint8_t* by_host = bytes_of(gathered_, chunk * H);
  cross_->all_gather(in, by_host, count, dtype);  // [h] = rank (h, i)'s input
  uint8_t* work = bytes_of(work_, chunk * H * L);
  local_->all_gather(by_host, work, H * count, dtype);  // [j][h] = rank (h, j)'s input
  for (int64_t j = 0; j < L; ++j) {
    for (int64_t h = 0; h < H; ++h) {
      std::memcpy(static_cast<uint8_t*>(out) + (h * L + j) * chunk, work + (j * H + h) * chunk,
                  size_t(chunk));
    }
  }
}

void HierarchicalCommunicator::broadcast(void* data, int64_t count, DType dtype, int root) {
  TP_CHECK(root >= 0 && root < size(), "[hybrid broadcast] root: got ", root, ", expected 0..",
           size() - 1, " (", name(), ")");
  const int L = local_->size();
  if (local_->rank() == root % L) cross_->broadcast(data, count, dtype, root / L);
  local_->broadcast(data, count, dtype, root % L);
}

void HierarchicalCommunicator::all_to_all(const void* in, std::span<const int64_t> send_counts,
                                          void* out, std::span<const int64_t> recv_counts,
                                          DType dtype) {
  flat_->all_to_all(in, send_counts, out, recv_counts, dtype);
}

void HierarchicalCommunicator::send(const void* data, int64_t count, DType dtype, int peer) {
  flat_->send(data, count, dtype, peer);
}

void HierarchicalCommunicator::recv(void* data, int64_t count, DType dtype, int peer) {
  flat_->recv(data, count, dtype, peer);
}

void HierarchicalCommunicator::barrier() { flat_->barrier(); }

std::unique_ptr<Communicator> HierarchicalCommunicator::split(int color, int key) {
  std::unique_ptr<Communicator> child = flat_->split(color, key);
  if (!child) return nullptr;  // a negative color opts out
  return make_hierarchical(std::move(child), host_id_);
}

}  // namespace tensorpar
