#include "core/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <omp.h>

#include "core/buffer_cache.h"
#include "core/checked_math.h"
#include "core/quant.h"
#include "core/weight_arena.h"

namespace tensorpar {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    TP_CHECK(d >= 0, "[shape_numel] negative dim in shape ", shape_str(s));
    n = checked_mul(n, d, "shape_numel");
  }
  return n;
}

static Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    // A zero-size dim elsewhere can make numel fit while the strides do not: still an error.
    acc = checked_mul(acc, std::max<int64_t>(s[i], 1), "contiguous_strides");
  }
  return st;
}

namespace {

// Large buffers are page-aligned mappings (fresh ones are lazily zero pages; released ones are
// cached for reuse, see buffer_cache.h). Small ones use the heap.
std::shared_ptr<void> allocate(int64_t nbytes, bool* zeroed) {
  const size_t n = size_t((nbytes + 63) / 64 * 64);
  if (zeroed) *zeroed = false;
  if (std::shared_ptr<void> p = weight_arena_alloc(n)) {  // never reused: fresh zero pages
    if (zeroed) *zeroed = true;
    return p;
  }
  if (n >= kLargeBufferBytes) {
    bool fresh = false;
    void* p = large_buffer_alloc(n, &fresh);
    if (zeroed) *zeroed = fresh;
    return std::shared_ptr<void>(p, [n](void* q) { large_buffer_free(q, n); });
  }
  void* p = n ? std::aligned_alloc(64, n) : nullptr;
  TP_CHECK(p || n == 0, "[aligned_alloc] out of memory allocating ", nbytes, " bytes");
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

}  // namespace

std::shared_ptr<void> aligned_alloc_shared(int64_t nbytes) { return allocate(nbytes, nullptr); }

Tensor Tensor::empty(const Shape& shape, DType dtype) { return allocate_tensor(shape, dtype, nullptr); }

Tensor Tensor::allocate_tensor(const Shape& shape, DType dtype, bool* zeroed) {
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  if (dtype_is_blocked(dtype)) {
    TP_CHECK(!shape.empty() && shape.back() % dtype_block_elems(dtype) == 0, "[Tensor::empty] ",
             dtype_name(dtype), " tensor of shape ", shape_str(shape), " needs its last dim a multiple of ",
             dtype_block_elems(dtype));
  }
  if (const int64_t group = dtype_packed_rows(dtype)) {
    TP_CHECK(shape.size() == 2 && shape[0] % group == 0, "[Tensor::empty] ", dtype_name(dtype), " tensor of shape ",
             shape_str(shape), ": row-packed tensors are 2-D with whole groups of ", group, " rows");
  }
  t.storage_ = allocate(dtype_nbytes(dtype, t.numel_), zeroed);
  t.data_ = t.storage_.get();
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  bool zeroed = false;
  Tensor t = allocate_tensor(shape, dtype, &zeroed);
  if (!zeroed) t.fill_zero();
  return t;
}

Tensor Tensor::from_f32(const Shape& shape, std::span<const float> values, DType dtype) {
  TP_CHECK(int64_t(values.size()) == shape_numel(shape), "[Tensor::from_f32] ", values.size(),
           " values for shape ", shape_str(shape));
  Tensor src = borrow(const_cast<float*>(values.data()), shape, DType::kF32);
  return src.to(dtype);
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype,
                      std::shared_ptr<void> keep_alive) {
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.data_ = data;
  t.storage_ = std::move(keep_alive);
  return t;
}

int64_t Tensor::dim(int d) const {
  const int n = ndim();
  TP_CHECK(d >= -n && d < n, "[Tensor::dim] dim ", d, " out of range for ", describe());
  return shape_[d < 0 ? d + n : d];
}

int64_t Tensor::nbytes() const { return dtype_nbytes(dtype_, numel_); }

bool Tensor::is_contiguous() const {
  if (numel_ <= 1) return true;
  int64_t acc = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != acc) return false;  // size-1 dims may carry any stride
    acc *= shape_[i];
  }
  return true;
}

void Tensor::check_type(DType t) const {
  TP_CHECK(t == dtype_, "[Tensor::data] requested ", dtype_name(t), " from a ", describe(),
           " tensor");
}

static char* offset_bytes(void* base, DType t, int64_t elems) {
  if (dtype_is_blocked(t)) {
    TP_ASSERT(elems % dtype_block_elems(t) == 0, "quantized offset inside a block");
    return static_cast<char*>(base) + elems / dtype_block_elems(t) * dtype_block_bytes(t);
  }
  return static_cast<char*>(base) + elems * dtype_block_bytes(t);
}

Tensor Tensor::slice(int d, int64_t begin, int64_t end) const {
  const int n = ndim();
  TP_CHECK(d >= -n && d < n, "[Tensor::slice] dim ", d, " out of range for ", describe());
  if (d < 0) d += n;
  TP_CHECK(0 <= begin && begin <= end && end <= shape_[d], "[Tensor::slice] range [", begin, ", ",
           end, ") out of bounds for dim ", d, " of ", describe());
  if (const int64_t group = dtype_packed_rows(dtype_)) {
    // A group of rows is one interleaved unit: whole rows from a group's start (the last group
    // may be cut short, its padding rows never read).
    TP_CHECK(d == 0 && begin % group == 0, "[Tensor::slice] ", describe(), " is row-packed: only rows from a "
             "multiple of ", group, ", got dim ", d, " [", begin, ", ", end, ")");
  }
  if (dtype_is_blocked(dtype_) && d == n - 1) {
    const int64_t be = dtype_block_elems(dtype_);
    TP_CHECK(begin % be == 0 && end % be == 0, "[Tensor::slice] ", describe(),
             " can only be sliced along its last dim at multiples of ", be, ", got [", begin, ", ", end, ")");
  }
  Tensor t = *this;
  t.shape_[d] = end - begin;
  t.numel_ = shape_numel(t.shape_);
  t.data_ = offset_bytes(data_, dtype_, begin * strides_[d]);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  TP_CHECK(is_contiguous(), "[Tensor::reshape] ", describe(), " is not contiguous");
  TP_CHECK(shape_numel(shape) == numel_, "[Tensor::reshape] cannot view ", describe(), " as ",
           shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  const int n = ndim();
  TP_CHECK(d0 >= -n && d0 < n && d1 >= -n && d1 < n, "[Tensor::transpose] dims ", d0, ", ", d1,
           " out of range for ", describe());
  TP_CHECK(!dtype_is_blocked(dtype_), "[Tensor::transpose] cannot transpose ", describe());
  if (d0 < 0) d0 += n;
  if (d1 < 0) d1 += n;
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

// Visits every element in row-major order as (source element offset, destination index).
template <typename F>
static void for_each_offset(const Shape& shape, const Shape& strides, F&& f) {
  const int n = int(shape.size());
  const int64_t total = shape_numel(shape);
  if (total == 0) return;
  std::vector<int64_t> idx(n, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < total; ++i) {
    f(off, i);
    for (int d = n - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= (shape[d] - 1) * strides[d];
      idx[d] = 0;
    }
  }
}

static float load_f32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const bf16*>(p)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const f16*>(p)[i]);
    case DType::kI32: return float(static_cast<const int32_t*>(p)[i]);
    case DType::kI64: return float(static_cast<const int64_t*>(p)[i]);
    case DType::kU8: return float(static_cast<const uint8_t*>(p)[i]);
    default: TP_ASSERT(false, "load_f32 on a quantized type");
  }
}

static void store_f32(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = v; return;
    case DType::kBF16: static_cast<bf16*>(p)[i] = f32_to_bf16(v); return;
    case DType::kF16: static_cast<f16*>(p)[i] = f32_to_f16(v); return;
    case DType::kI32: static_cast<int32_t*>(p)[i] = int32_t(v); return;
    case DType::kI64: static_cast<int64_t*>(p)[i] = int64_t(v); return;
    case DType::kU8: static_cast<uint8_t*>(p)[i] = uint8_t(v); return;
    default: TP_ASSERT(false, "store_f32 on a quantized type");
  }
}

std::vector<float> Tensor::to_vector() const {
  std::vector<float> out(static_cast<size_t>(numel_));
  if (numel_ == 0) return out;
  TP_CHECK(!dtype_packed_rows(dtype_), "[Tensor::to_vector] ", describe(),
           " is row-packed for an inference kernel (int8_unpack_rows / unpack_panels give its plain layout)");
  if (dtype_is_quantized(dtype_)) {
    const int64_t cols = shape_.back();
    const Shape outer(shape_.begin(), shape_.end() - 1), outer_st(strides_.begin(), strides_.end() - 1);
    TP_CHECK(strides_.back() == 1, "[Tensor::to_vector] ", describe(), " last dim not contiguous");
    for_each_offset(outer, outer_st, [&](int64_t off, int64_t r) {
      dequantize_row(out.data() + r * cols, offset_bytes(data_, dtype_, off), dtype_, cols);
    });
    return out;
  }
  for_each_offset(shape_, strides_, [&](int64_t off, int64_t i) { out[i] = load_f32(data_, dtype_, off); });
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  TP_CHECK(src.shape_ == shape_, "[Tensor::copy_from] shape mismatch: ", src.describe(), " into ",
           describe());
  TP_CHECK(!dtype_is_blocked(dtype_) || src.dtype_ == dtype_, "[Tensor::copy_from] cannot convert ",
           src.describe(), " into ", describe());
  if (numel_ == 0) return;
  if (src.dtype_ == dtype_ && is_contiguous() && src.is_contiguous()) {
    std::memcpy(data_, src.data_, size_t(nbytes()));
    return;
  }
  if (dtype_is_quantized(dtype_)) {
    // Block-quantized rows (whole blocks, the last dim dense in both): row by row.
    TP_CHECK(strides_.back() == 1 && src.strides_.back() == 1, "[Tensor::copy_from] ", src.describe(), " into ",
             describe(), ": quantized tensors copy whole rows only");
    const int64_t cols = shape_.back(), row_bytes = dtype_nbytes(dtype_, cols);
    const Shape outer(shape_.begin(), shape_.end() - 1);
    std::vector<int64_t> dst_rows;
    for_each_offset(outer, Shape(strides_.begin(), strides_.end() - 1), [&](int64_t off, int64_t) { dst_rows.push_back(off); });
    for_each_offset(outer, Shape(src.strides_.begin(), src.strides_.end() - 1), [&](int64_t off, int64_t r) {
      std::memcpy(offset_bytes(data_, dtype_, dst_rows[size_t(r)]), offset_bytes(src.data_, dtype_, off), size_t(row_bytes));
    });
    return;
  }
  TP_CHECK(!dtype_is_blocked(dtype_), "[Tensor::copy_from] strided copy of ", describe());
  if (src.dtype_ == dtype_ && !dtype_is_blocked(src.dtype_)) {
    // Same-type strided copy: element by element, exact for every type.
    const int64_t es = dtype_block_bytes(dtype_);
    std::vector<int64_t> dst_offs;
    dst_offs.reserve(size_t(numel_));
    for_each_offset(shape_, strides_, [&](int64_t off, int64_t) { dst_offs.push_back(off); });
    for_each_offset(src.shape_, src.strides_, [&](int64_t off, int64_t i) {
      std::memcpy(static_cast<char*>(data_) + dst_offs[size_t(i)] * es,
                  static_cast<const char*>(src.data_) + off * es, size_t(es));
    });
    return;
  }
  const std::vector<float> v = src.to_vector();
  for_each_offset(shape_, strides_, [&](int64_t off, int64_t i) { store_f32(data_, dtype_, off, v[size_t(i)]); });
}

Tensor Tensor::copy_to_new(DType dtype) const {
  Tensor t = empty(shape_, dtype);
  t.copy_from(*this);
  return t;
}

void Tensor::fill(float value) {
  TP_CHECK(!dtype_is_blocked(dtype_), "[Tensor::fill] cannot fill ", describe());
  for_each_offset(shape_, strides_, [&](int64_t off, int64_t) { store_f32(data_, dtype_, off, value); });
}

namespace {

// Zeroes n bytes at p; from 1 MiB on in 64 KiB pieces over the calling thread's OpenMP team (a
// training step zeroes every gradient and its backward's gradient buffers, tens of MB, which one
// thread wrote while the rest of its team waited).
void zero_bytes(void* p, size_t n) {
  constexpr size_t kParallelFrom = size_t(1) << 20, kPiece = size_t(1) << 16;
  if (n < kParallelFrom || omp_in_parallel()) {
    std::memset(p, 0, n);
    return;
  }
  const int64_t pieces = int64_t((n + kPiece - 1) / kPiece);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < pieces; ++i) {
    const size_t at = size_t(i) * kPiece;
    std::memset(static_cast<char*>(p) + at, 0, std::min(kPiece, n - at));
  }
}

}  // namespace

void Tensor::fill_zero() {
  if (is_contiguous()) {
    if (numel_) zero_bytes(data_, size_t(nbytes()));
    return;
  }
  fill(0.0f);
}

std::string Tensor::describe() const {
  std::string s = std::string(dtype_name(dtype_)) + shape_str(shape_);
  if (!is_contiguous()) s += " strided";
  return s;
}

}  // namespace tensorpar
