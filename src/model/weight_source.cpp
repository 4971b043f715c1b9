// WeightSource (see weight_source.h).
#include "model/weight_source.h"

#include <cctype>
#include <cstdio>
#include <mutex>
#include <set>

#include "core/error.h"

namespace tensorpar {

// Slices of quantized matrices that could not stay quantized; shared by a source's loaders,
// which ranks may call at the same time.
struct FallbackLog {
  std::mutex mu;
  std::set<std::string> noted;  // "kind range" already written to stderr
  int64_t count = 0;

  void note(const std::string& file, const std::string& name, DType t, const std::string& what) {
    // The kind: the name with its layer number wildcarded ("blk.*.attn_output.weight").
    std::string kind;
    for (const char ch : name) {
      if (!std::isdigit(static_cast<unsigned char>(ch)))
        kind += ch;
      else if (kind.empty() || kind.back() != '*')
        kind += '*';
    }
    std::lock_guard<std::mutex> lock(mu);
    ++count;
    if (!noted.insert(std::string(dtype_name(t)) + " " + kind + " " + what).second) return;
    std::fprintf(stderr, "[load_model] %s: %s '%s' %s: that shard is dequantized to f32\n", file.c_str(),
                 std::string(dtype_name(t)).c_str(), kind.c_str(), what.c_str());
  }
};

WeightSource::WeightSource(std::shared_ptr<TensorStore> store, std::string path, LoadOptions opt)
    : store_(std::move(store)), path_(std::move(path)), opt_(opt), fallbacks_(std::make_shared<FallbackLog>()) {
  TP_CHECK(!opt_.float_weights || *opt_.float_weights == DType::kF32 || *opt_.float_weights == DType::kBF16,
           "[WeightSource] float_weights: got ", dtype_name(*opt_.float_weights), ", expected f32, bf16 or as stored");
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
  return loader(name, stored_shape, fused_dim, offset, shape, conv1d, -1);
}

SliceLoader WeightSource::stacked(const std::string& name, int64_t count, int64_t index, const Shape& shape) const {
  TP_CHECK(shape.size() == 2, "[WeightSource::stacked] ", name, ": shape ", shape_str(shape));
  check(name, {count, shape[0], shape[1]});
  return loader(name, shape, 0, 0, shape, false, index);
}

SliceLoader WeightSource::loader(const std::string& name, const Shape& stored_shape, int fused_dim, int64_t offset,
                                 const Shape& shape, bool conv1d, int64_t outer) const {
  auto store = store_;
  const LoadOptions opt = opt_;
  const std::optional<DType> stored = store_->find(name)->dtype;
  const std::string where = path_;
  const std::shared_ptr<FallbackLog> log = fallbacks_;
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
      const int64_t be = dtype_block_elems(*stored);
      const bool aligned = !last || (b % be == 0 && e % be == 0);
      if (opt.keep_quantized && aligned && !conv1d && shape.size() == 2) {
        out = std::nullopt;
      } else if (opt.keep_quantized && shape.size() == 2) {
        log->note(where, name, *stored,
                  conv1d ? std::string("is stored transposed (Conv1D)")
                         : "columns " + range_str(Range{b, e}) + " of " + std::to_string(stored_shape.back()) +
                               " are not whole " + std::to_string(be) + "-weight blocks");
      }
    } else if (shape.size() == 2) {
      const bool half = stored && (*stored == DType::kBF16 || *stored == DType::kF16);
      out = opt.float_weights ? *opt.float_weights : half ? *stored : DType::kF32;
    }
    const bool part = offset != 0 || stored_shape[size_t(fused_dim)] != shape[size_t(conv1d ? 1 - fused_dim : fused_dim)];
    TP_CHECK(!part || sdim == fused_dim, "[load_model] ", where, ": '", name,
             "' is fused: only its fused dim can be sliced (got dim ", sdim, ")");
    Tensor t = outer < 0 ? store->read_slice(name, sdim, b, e, out)
                         : copy_slice(outer_part(store->stored(name), outer), sdim, b, e, out);
    if (conv1d && shape.size() == 2) t = t.transpose(0, 1).contiguous();
    return t;
  };
}

SliceLoader WeightSource::f32(const std::string& name, const Shape& shape) const {
  check(name, shape);
  auto store = store_;
  return [store, name](int dim, Range r) { return store->read_slice(name, dim, r.begin, r.end, DType::kF32); };
}

int64_t WeightSource::dequantized_fallbacks() const {
  std::lock_guard<std::mutex> lock(fallbacks_->mu);
  return fallbacks_->count;
}

Tensor WeightSource::whole_f32(const std::string& name, const Shape& shape) const {
  check(name, shape);
  return store_->read(name, DType::kF32);
}

}  // namespace tensorpar
