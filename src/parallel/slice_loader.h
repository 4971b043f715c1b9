// Where a TP layer gets its weight shard: a callback that returns the slice [range) along one
// dim of the full tensor, so a file-backed loader reads only this rank's bytes. slice_of() wraps
// a full tensor already in memory (tests, small models). ensure_grad / ensure_f32 / rows_of:
// the layers' lazy gradients and the buffers they keep across steps.
#pragma once

#include <functional>

#include "core/tensor.h"
#include "parallel/partition.h"

namespace tensorpar {

// Returns the slice [range) along `dim` of the full tensor (any dtype the layer accepts; a view
// is fine, the layer keeps a reference to its storage).
using SliceLoader = std::function<Tensor(int dim, Range range)>;

// Slices of `full` (kept alive by the returned loader), as contiguous copies.
inline SliceLoader slice_of(Tensor full) {
  return [full](int dim, Range range) {
    const Tensor s = full.slice(dim, range.begin, range.end);
    // An empty shard (more ranks than rows) is made directly: nothing to copy.
    return s.numel() == 0 ? Tensor::empty(s.shape(), s.dtype()) : s.contiguous();
  };
}

// t as f32 (a copy when converting; empty tensors are made, not copied).
inline Tensor as_f32(const Tensor& t) {
  if (t.numel() == 0) return Tensor::empty(t.shape(), DType::kF32);
  return t.dtype() == DType::kF32 && t.is_contiguous() ? t : t.to(DType::kF32);
}

// Whether t already is an allocated f32 tensor of `shape`.
inline bool is_f32_of(const Tensor& t, const Shape& shape) {
  return t.shape() == shape && t.dtype() == DType::kF32 && (t.numel() == 0 || t.raw());
}

// Allocates a zeroed f32 gradient of `shape` unless `grad` already is one (layers call it on
// their first backward; later calls accumulate into it).
inline void ensure_grad(Tensor& grad, const Shape& shape) {
  if (!is_f32_of(grad, shape)) grad = Tensor::zeros(shape, DType::kF32);
}

// A buffer kept across training steps (saved activations, scratch): reallocated, uninitialised,
// only when it is not an f32 tensor of `shape` already.
inline void ensure_f32(Tensor& t, const Shape& shape) {
  if (!is_f32_of(t, shape)) t = Tensor::empty(shape, DType::kF32);
}

// The first N rows of a (rows >= N, cols) f32 buffer kept across calls (inference scratch,
// saved activations), reallocated only to grow or when its width changes.
inline Tensor scratch_rows(Tensor& buf, int64_t N, int64_t cols) {
  if (buf.ndim() != 2 || buf.dim(1) != cols || buf.dim(0) < N || buf.dtype() != DType::kF32)
    buf = Tensor::empty({N, cols}, DType::kF32);
  return buf.dim(0) == N ? buf : buf.slice(0, 0, N);
}

}  // namespace tensorpar
