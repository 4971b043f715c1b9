// Tensor: shape, strides (in elements), dtype, device, and storage that is either owned
// (64-byte aligned, shared between views) or borrowed (a view over memory someone else keeps
// alive, e.g. an mmap). Views slice along any dim without copying. Block-quantized tensors
// must keep their last dim contiguous and slice it only at block boundaries.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"

namespace tensorpar {

enum class Device : uint8_t { kCpu, kCuda };

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);  // "[2, 3, 4]"
// Product of dims, overflow-checked; throws on a negative dim.
int64_t shape_numel(const Shape& s);

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<bf16>() { return DType::kBF16; }
template <> constexpr DType dtype_of<f16>() { return DType::kF16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kI64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kU8; }

class Tensor {
 public:
  Tensor() = default;

  // Owning, 64-byte aligned, uninitialised.
  static Tensor empty(const Shape& shape, DType dtype);
  static Tensor zeros(const Shape& shape, DType dtype);
  // Owning copy of the values (f32), converted to dtype (a float type).
  static Tensor from_f32(const Shape& shape, std::span<const float> values, DType dtype = DType::kF32);
  // Non-owning contiguous view over data; `keep_alive` (may be null) is held by the tensor and
  // every view of it, e.g. the mapping a weight was read from.
  static Tensor borrow(void* data, const Shape& shape, DType dtype,
                       std::shared_ptr<void> keep_alive = nullptr);

  bool defined() const { return data_ != nullptr || numel_ == 0; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int ndim() const { return int(shape_.size()); }
  // Size of dim d; negative d counts from the end.
  int64_t dim(int d) const;
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t nbytes() const;  // bytes of the elements (contiguous layout)
  bool is_contiguous() const;

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  // Typed pointer to the first element; throws if T does not match dtype.
  template <typename T>
  T* data() {
    check_type(dtype_of<T>());
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    check_type(dtype_of<T>());
    return static_cast<const T*>(data_);
  }

  // View of [begin, end) along dim d (no copy).
  Tensor slice(int d, int64_t begin, int64_t end) const;
  // View with a new shape; requires a contiguous tensor and the same element count.
  Tensor reshape(const Shape& shape) const;
  // View with dims d0 and d1 swapped (strides only).
  Tensor transpose(int d0, int d1) const;
  // This tensor if already contiguous, else a contiguous owning copy.
  Tensor contiguous() const;
  Tensor clone() const { return copy_to_new(dtype_); }
  // Owning contiguous copy converted to `dtype` (float types; quantized sources dequantize).
  Tensor to(DType dtype) const { return copy_to_new(dtype); }
  // Copies src's values into this tensor (same shape; float types convert).
  void copy_from(const Tensor& src);
  void fill(float value);
  void fill_zero();
  // All elements as f32, in row-major order (dequantizes and converts).
  std::vector<float> to_vector() const;

  std::string describe() const;  // "f32[2, 3]" (+ " strided" when not contiguous)

 private:
  void check_type(DType t) const;
  Tensor copy_to_new(DType dtype) const;
  // empty(); *zeroed (if given) tells whether the memory is known to be zero already.
  static Tensor allocate_tensor(const Shape& shape, DType dtype, bool* zeroed);

  std::shared_ptr<void> storage_;  // owns or keeps alive the memory; null for plain borrows
  void* data_ = nullptr;           // first element
  Shape shape_;
  Shape strides_;  // in elements
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
};

// 64-byte aligned allocation (throws on failure) and its deleter; >= 1 MiB comes from mmap.
std::shared_ptr<void> aligned_alloc_shared(int64_t nbytes);

}  // namespace tensorpar
