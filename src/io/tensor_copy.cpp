// The slice-and-convert copy behind every reader. A tensor is viewed as rows of its last dim:
// slicing an outer dim selects runs of whole rows; slicing the last dim selects a column range
// of every row. Same-format copies are memcpy; others decode a row to f32, then encode.
#include "io/tensor_copy.h"

#include <cstring>
#include <vector>

#include "core/checked_math.h"
#include "core/quant.h"

namespace tensorpar {
namespace {

void decode_f32(float* out, const std::byte* src, int64_t n) {
  std::memcpy(out, src, size_t(n) * 4);
}
void decode_f16(float* out, const std::byte* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    f16 h;
    std::memcpy(&h.bits, src + 2 * i, 2);
    out[i] = f16_to_f32(h);
  }
}
void decode_bf16(float* out, const std::byte* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    bf16 h;
    std::memcpy(&h.bits, src + 2 * i, 2);
    out[i] = bf16_to_f32(h);
  }
}
void decode_f64(float* out, const std::byte* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double d;
    std::memcpy(&d, src + 8 * i, 8);
    out[i] = float(d);
  }
}
void decode_q8_0(float* out, const std::byte* src, int64_t n) {
  dequantize_row(out, src, DType::kQ8_0, n);
}
void decode_q4_0(float* out, const std::byte* src, int64_t n) {
  dequantize_row(out, src, DType::kQ4_0, n);
}
void decode_q4_1(float* out, const std::byte* src, int64_t n) {
  dequantize_row(out, src, DType::kQ4_1, n);
}

// Writes n floats as dtype t at dst (a float type, or a block quant when n is whole blocks).
void encode(std::byte* dst, DType t, const float* x, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, x, size_t(n) * 4);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = f32_to_bf16(x[i]).bits;
        std::memcpy(dst + 2 * i, &b, 2);
      }
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = f32_to_f16(x[i]).bits;
        std::memcpy(dst + 2 * i, &b, 2);
      }
      return;
    default:
      quantize_row(dst, x, t, n);
      return;
  }
}

}  // namespace

const StoredFormat kStoredF32{"F32", 1, 4, DType::kF32, decode_f32};
const StoredFormat kStoredF16{"F16", 1, 2, DType::kF16, decode_f16};
const StoredFormat kStoredBF16{"BF16", 1, 2, DType::kBF16, decode_bf16};
const StoredFormat kStoredF64{"F64", 1, 8, std::nullopt, decode_f64};
const StoredFormat kStoredI64{"I64", 1, 8, DType::kI64, nullptr};
const StoredFormat kStoredI32{"I32", 1, 4, DType::kI32, nullptr};
const StoredFormat kStoredU8{"U8", 1, 1, DType::kU8, nullptr};
const StoredFormat kStoredQ8_0{"Q8_0", 32, 34, DType::kQ8_0, decode_q8_0};
const StoredFormat kStoredQ4_0{"Q4_0", 32, 18, DType::kQ4_0, decode_q4_0};
const StoredFormat kStoredQ4_1{"Q4_1", 32, 20, DType::kQ4_1, decode_q4_1};

int64_t file_shape_numel(const Shape& shape, const char* where) {
  int64_t span = 1;
  bool empty = false;
  for (int64_t d : shape) {
    TP_CHECK(d >= 0, "[", where, "] negative dim in shape ", shape_str(shape));
    if (d == 0)
      empty = true;
    else
      span = checked_mul(span, d, where);
  }
  return empty ? 0 : span;
}

StoredTensor outer_part(const StoredTensor& src, int64_t index) {
  TP_CHECK(src.shape.size() >= 2 && index >= 0 && index < src.shape[0], "[outer_part] tensor '", src.name, "' in '",
           src.file, "' of shape ", shape_str(src.shape), ": no part ", index, " along dim 0");
  StoredTensor p = src;
  p.shape.erase(p.shape.begin());
  p.nbytes = src.nbytes / src.shape[0];  // rows of whole blocks: every part has the same bytes
  p.data = src.data + index * p.nbytes;
  p.name = src.name + "[" + std::to_string(index) + "]";
  return p;
}

Tensor copy_slice(const StoredTensor& src, int dim, int64_t begin, int64_t end,
                  std::optional<DType> out_opt) {
  const StoredFormat& f = *src.format;
  const int nd = int(src.shape.size());
  TP_CHECK(nd >= 1 && dim >= 0 && dim < nd, "[copy_slice] tensor '", src.name, "' in '", src.file,
           "': dim ", dim, " out of range for shape ", shape_str(src.shape));
  TP_CHECK(0 <= begin && begin <= end && end <= src.shape[size_t(dim)], "[copy_slice] tensor '",
           src.name, "' in '", src.file, "': range [", begin, ", ", end, ") along dim ", dim,
           " is outside shape ", shape_str(src.shape));
  const DType out = out_opt ? *out_opt : [&] {
    TP_CHECK(f.dtype.has_value() || f.decode, "[copy_slice] tensor '", src.name, "' in '", src.file,
             "': stored as ", f.name, ", which is recognised but not supported for loading");
    TP_CHECK(f.dtype.has_value(), "[copy_slice] tensor '", src.name, "' in '", src.file,
             "': stored as ", f.name, ", which has no in-memory dtype; request a float dtype");
    return *f.dtype;
  }();
  const bool same = f.dtype == out;
  TP_CHECK(same || (f.decode && (dtype_is_float(out) || dtype_is_quantized(out))),
           "[copy_slice] tensor '", src.name, "' in '", src.file, "': cannot load ", f.name, " as ",
           dtype_name(out),
           f.decode ? "" : ": this stored format is recognised but not supported for loading");

  const int64_t numel = shape_numel(src.shape);
  const int64_t L = src.shape.back();  // elements per row
  TP_ASSERT(L == 0 || L % f.block_elems == 0, src.name);
  // An empty tensor has no bytes (and its other dims may be huge: no row-size math on it).
  TP_ASSERT(numel == 0 ? src.nbytes == 0
                       : src.nbytes == checked_mul(numel / L, L / f.block_elems * f.block_bytes,
                                                   "copy_slice"),
            src.name);
  Shape out_shape = src.shape;
  out_shape[size_t(dim)] = end - begin;
  const bool last = dim == nd - 1;
  if (dtype_is_quantized(out)) {
    TP_CHECK(out_shape.back() % dtype_block_elems(out) == 0, "[copy_slice] tensor '", src.name,
             "' in '", src.file, "': cannot hold ", shape_str(out_shape), " as ", dtype_name(out),
             ": the last dim must be a multiple of ", dtype_block_elems(out));
  }
  Tensor t = Tensor::empty(out_shape, out);
  if (t.numel() == 0) return t;

  const int64_t c0 = last ? begin : 0, c1 = last ? end : L;  // column range of each row
  // Runs of consecutive source rows: (first row, count), in output order.
  std::vector<std::pair<int64_t, int64_t>> runs;
  if (last) {
    runs.push_back({0, numel / L});
  } else {
    int64_t outer = 1, inner_rows = 1;
    for (int d = 0; d < dim; ++d) outer *= src.shape[size_t(d)];
    for (int d = dim + 1; d < nd - 1; ++d) inner_rows *= src.shape[size_t(d)];
    const int64_t mid = src.shape[size_t(dim)];
    for (int64_t o = 0; o < outer; ++o)
      runs.push_back({(o * mid + begin) * inner_rows, (end - begin) * inner_rows});
  }
  const int64_t be = f.block_elems;
  const int64_t src_row_bytes = L / be * f.block_bytes;
  const int64_t out_row_bytes = dtype_nbytes(out, c1 - c0);
  auto* dst = static_cast<std::byte*>(t.raw());

  if (same) {
    TP_CHECK(c0 % be == 0 && c1 % be == 0, "[copy_slice] tensor '", src.name, "' in '", src.file,
             "': columns [", c0, ", ", c1, ") of ", f.name, " are not aligned to its ", be,
             "-element blocks; request a float dtype to dequantize and slice");
    const int64_t col_off = c0 / be * f.block_bytes;
    for (auto [row, count] : runs) {
      const std::byte* s = src.data + row * src_row_bytes;
      if (c0 == 0 && c1 == L) {
        std::memcpy(dst, s, size_t(count * src_row_bytes));
        dst += count * src_row_bytes;
      } else {
        for (int64_t r = 0; r < count; ++r, dst += out_row_bytes, s += src_row_bytes)
          std::memcpy(dst, s + col_off, size_t(out_row_bytes));
      }
    }
    return t;
  }
  // Decode the blocks covering [c0, c1) of each row, then encode the exact range.
  const int64_t b0 = c0 / be, b1 = (c1 + be - 1) / be;
  std::vector<float> tmp(size_t((b1 - b0) * be));
  const int64_t skip = c0 - b0 * be;
  // f32 out over whole blocks: decode straight into the destination.
  const bool direct = out == DType::kF32 && skip == 0 && c1 - c0 == (b1 - b0) * be;
  for (auto [row, count] : runs) {
    for (int64_t r = 0; r < count; ++r, dst += out_row_bytes) {
      const std::byte* s = src.data + (row + r) * src_row_bytes + b0 * f.block_bytes;
      if (direct) {
        f.decode(reinterpret_cast<float*>(dst), s, c1 - c0);
      } else {
        f.decode(tmp.data(), s, (b1 - b0) * be);
        encode(dst, out, tmp.data() + skip, c1 - c0);
      }
    }
  }
  return t;
}

Tensor copy_whole(const StoredTensor& src, std::optional<DType> out) {
  if (!src.shape.empty()) return copy_slice(src, 0, 0, src.shape[0], out);
  StoredTensor one = src;  // a 0-dim tensor: one element
  one.shape = {1};
  return copy_slice(one, 0, 0, 1, out).reshape({});
}

}  // namespace tensorpar
