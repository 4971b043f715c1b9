// Tensor-parallel mappings (see mappings.h). Uneven shards travel through the equal-count
// collectives in a buffer padded to the largest shard; even shards go straight through.
#include "parallel/mappings.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace tensorpar {
namespace {

// memcpy of n floats; n == 0 is a no-op even when the pointers are null (empty tensors).
void copy_floats(void* dst, const void* src, int64_t n) {
  if (n > 0) std::memcpy(dst, src, sizeof(float) * size_t(n));
}

void check_f32(const Tensor& t, const char* where, const char* name, const Communicator& c) {
  TP_CHECK(t.dtype() == DType::kF32 && t.is_contiguous() && t.ndim() >= 1, "[", where, "] ", name,
           ": got ", t.describe(), ", expected contiguous f32 with >= 1 dim (", c.name(), " rank ",
           c.rank(), ")");
}

// Trailing dims (all but the first) must match; returns their product (elements per row).
int64_t row_elems(const Tensor& a, const Tensor& b, const char* where, const Communicator& c) {
  bool same = a.ndim() == b.ndim();
  for (int d = 1; same && d < a.ndim(); ++d) same = a.dim(d) == b.dim(d);
  TP_CHECK(same, "[", where, "] trailing dims differ: got ", a.describe(), " and ", b.describe(),
           " (", c.name(), " rank ", c.rank(), ")");
  int64_t n = 1;
  for (int d = 1; d < a.ndim(); ++d) n *= a.dim(d);
  return n;
}

}  // namespace

void copy_to_tp_region_backward(Tensor& d_x, Communicator& tp) {
  if (tp.size() == 1) return;
  check_f32(d_x, "copy_to_tp_region_backward", "d_x", tp);
  tp.all_reduce(d_x, ReduceOp::kSum);
}

void reduce_from_tp_region_forward(Tensor& x, Communicator& tp) {
  if (tp.size() == 1) return;
  check_f32(x, "reduce_from_tp_region_forward", "x", tp);
  tp.all_reduce(x, ReduceOp::kSum);
}

namespace {

void split_rows(Tensor& local, const Tensor& full, Communicator& tp, const char* where) {
  check_f32(local, where, "local", tp);
  check_f32(full, where, "full", tp);
  const int64_t per_row = row_elems(local, full, where, tp);
  const Range mine = partition_even(full.dim(0), tp.size(), tp.rank());
  TP_CHECK(local.dim(0) == mine.size(), "[", where, "] local: got ", local.describe(),
           ", expected ", mine.size(), " rows (", range_str(mine), " of ", full.dim(0), ", ",
           tp.name(), " rank ", tp.rank(), ")");
  if (local.raw() == full.raw()) return;
  copy_floats(local.raw(), full.data<float>() + mine.begin * per_row, mine.size() * per_row);
}

}  // namespace

void all_gather_rows(Tensor& full, const Tensor& local, Communicator& tp) {
  const char* where = "all_gather_rows";
  check_f32(local, where, "local", tp);
  check_f32(full, where, "full", tp);
  const int64_t per_row = row_elems(local, full, where, tp);
  const int64_t n = full.dim(0);
  const Range mine = partition_even(n, tp.size(), tp.rank());
  TP_CHECK(local.dim(0) == mine.size(), "[", where, "] local: got ", local.describe(),
           ", expected ", mine.size(), " rows (", range_str(mine), " of ", n, ", ", tp.name(),
           " rank ", tp.rank(), ")");
  if (tp.size() == 1) {
    if (full.raw() != local.raw()) full.copy_from(local);
    return;
  }
  const int64_t max_rows = partition_even(n, tp.size(), 0).size();
  if (n % tp.size() == 0) {
    tp.all_gather(local.raw(), full.raw(), max_rows * per_row, DType::kF32);
    return;
  }
  Tensor send = Tensor::zeros({max_rows * per_row}, DType::kF32);
  copy_floats(send.raw(), local.raw(), local.numel());
  Tensor all = Tensor::empty({tp.size() * max_rows * per_row}, DType::kF32);
  tp.all_gather(send.raw(), all.raw(), max_rows * per_row, DType::kF32);
  for (int k = 0; k < tp.size(); ++k) {
    const Range rk = partition_even(n, tp.size(), k);
    copy_floats(full.data<float>() + rk.begin * per_row, all.data<float>() + k * max_rows * per_row, rk.size() * per_row);
  }
}

void reduce_scatter_rows(Tensor& local, const Tensor& full, Communicator& tp) {
  const char* where = "reduce_scatter_rows";
  check_f32(local, where, "local", tp);
  check_f32(full, where, "full", tp);
  const int64_t per_row = row_elems(local, full, where, tp);
  const int64_t n = full.dim(0);
  const Range mine = partition_even(n, tp.size(), tp.rank());
  TP_CHECK(local.dim(0) == mine.size(), "[", where, "] local: got ", local.describe(),
           ", expected ", mine.size(), " rows (", range_str(mine), " of ", n, ", ", tp.name(),
           " rank ", tp.rank(), ")");
  if (tp.size() == 1) {
    if (full.raw() != local.raw()) local.copy_from(full);
    return;
  }
  const int64_t max_rows = partition_even(n, tp.size(), 0).size();
  if (n % tp.size() == 0) {
    tp.reduce_scatter(full.raw(), local.raw(), max_rows * per_row, DType::kF32, ReduceOp::kSum);
    return;
  }
  Tensor send = Tensor::zeros({tp.size() * max_rows * per_row}, DType::kF32);
  for (int k = 0; k < tp.size(); ++k) {
    const Range rk = partition_even(n, tp.size(), k);
    copy_floats(send.data<float>() + k * max_rows * per_row, full.data<float>() + rk.begin * per_row, rk.size() * per_row);
  }
  Tensor recv = Tensor::empty({max_rows * per_row}, DType::kF32);
  tp.reduce_scatter(send.raw(), recv.raw(), max_rows * per_row, DType::kF32, ReduceOp::kSum);
  copy_floats(local.raw(), recv.raw(), local.numel());
}

void scatter_to_sequence_parallel_region_forward(Tensor& out, const Tensor& in, Communicator& tp) {
  split_rows(out, in, tp, "scatter_to_sequence_parallel_region_forward");
}

void scatter_to_sequence_parallel_region_backward(Tensor& d_in, const Tensor& d_out,
                                                  Communicator& tp) {
  all_gather_rows(d_in, d_out, tp);
}

void gather_from_sequence_parallel_region_forward(Tensor& out, const Tensor& in, Communicator& tp) {
  all_gather_rows(out, in, tp);
}

void gather_from_sequence_parallel_region_backward(Tensor& d_in, const Tensor& d_out,
                                                   Communicator& tp) {
  reduce_scatter_rows(d_in, d_out, tp);
}

void reduce_scatter_to_sequence_parallel_region_forward(Tensor& out, const Tensor& in,
                                                        Communicator& tp) {
  reduce_scatter_rows(out, in, tp);
}

void reduce_scatter_to_sequence_parallel_region_backward(Tensor& d_in, const Tensor& d_out,
                                                         Communicator& tp) {
  all_gather_rows(d_in, d_out, tp);
}

}  // namespace tensorpar
