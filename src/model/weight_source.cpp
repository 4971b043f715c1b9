// WeightSource (see weight_source.h).
#include "model/weight_source.h"

#include "core/error.h"

namespace tensorpar {

namespace {

constexpr int64_t kBlock = 32;  // elements per quantized block (q8_0, q4_0, q4_1)

}  // namespace

WeightSource::WeightSource(std::shared_ptr<TensorStore> store, std::string path, LoadOptions opt)
    : store_(std::move(store)), path_(std::move(path)), opt_(opt) {
  TP_CHECK(opt_.float_weights == DType::kF32 || opt_.float_weights == DType::kBF16,
           "[WeightSource] float_weights: got ", dtype_name(opt_.float_weights), ", expected f32 or bf16");
}

void WeightSource::check(const std::string& name, const Shape& stored_shape) const {
  auto info = store_->find(name);
  TP_CHECK(info.has_value(), "[load_model] ", path_, ": missing tensor '", name, "'");
  TP_CHECK(info->shape == stored_shape, "[load_model] ", info->file, ": tensor '", name, "' has shape ",
           shape_str(info->shape), ", expected ", shape_str(stored_shape), " from the model config");
  TP_CHECK(info->dtype.has_value() || info->format == "F64", "[load_model] ", info->file, ": tensor '", name,
           "' has unsupported type ", info->format);
}

SliceLoader WeightSource::matrix(const std::string& name, const Shape& shape, bool conv1d) const {
  TP_CHECK(shape.size() == 2, "[WeightSource::matrix] ", name, ": shape ", shape_str(shape));
  return fused(name, conv1d ? Shape{shape[1], shape[0]} : shape, 0, 0, shape, conv1d);
}

SliceLoader WeightSource::fused(const std::string& name, const Shape& stored_shape, int fused_dim, int64_t offset,
                                const Shape& shape, bool conv1d) const {
  check(name, stored_shape);
  auto store = store_;
  const LoadOptions opt = opt_;
  const std::optional<DType> stored = store_->find(name)->dtype;
  const std::string where = path_;
  return [=](int dim, Range r) -> Tensor {
    TP_CHECK(dim >= 0 && dim < int(shape.size()) && r.begin >= 0 && r.end <= shape[size_t(dim)] && r.begin <= r.end,
             "[load_model] ", where, ": slice ", range_str(r), " of dim ", dim, " of '", name, "' ", shape_str(shape));
    if (r.empty()) {  // a rank with no part of this tensor (e.g. no attention heads)
      Shape z = shape;
      z[size_t(dim)] = 0;
      return Tensor::zeros(z, DType::kF32);
    }
    const int sdim = conv1d && shape.size() == 2 ? 1 - dim : dim;  // the stored dim
    int64_t b = r.begin, e = r.end;
    if (sdim == fused_dim) b += offset, e += offset;
    std::optional<DType> out = DType::kF32;
    if (stored && dtype_is_quantized(*stored)) {
      const bool last = sdim == int(stored_shape.size()) - 1;
      const bool aligned = !last || (b % kBlock == 0 && e % kBlock == 0);
      if (opt.keep_quantized && aligned && !conv1d && shape.size() == 2) out = std::nullopt;
    } else if (shape.size() == 2) {
      out = opt.float_weights;
    }
    const bool part = offset != 0 || stored_shape[size_t(fused_dim)] != shape[size_t(conv1d ? 1 - fused_dim : fused_dim)];
    TP_CHECK(!part || sdim == fused_dim, "[load_model] ", where, ": '", name,
             "' is fused: only its fused dim can be sliced (got dim ", sdim, ")");
    Tensor t = store->read_slice(name, sdim, b, e, out);
    if (conv1d && shape.size() == 2) t = t.transpose(0, 1).contiguous();
    return t;
  };
}

SliceLoader WeightSource::f32(const std::string& name, const Shape& shape) const {
  check(name, shape);
  auto store = store_;
  return [store, name](int dim, Range r) { return store->read_slice(name, dim, r.begin, r.end, DType::kF32); };
}

Tensor WeightSource::whole_f32(const std::string& name, const Shape& shape) const {
  check(name, shape);
  return store_->read(name, DType::kF32);
}

}  // namespace tensorpar
