// VocabParallelEmbedding (see vocab_parallel_embedding.h).
#include "parallel/vocab_parallel_embedding.h"

#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "kernels/cpu/panel_matmul.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/int8_packed.h"
#include "kernels/cpu/packed_weights.h"
#include "parallel/mappings.h"
#include "parallel/rng.h"
#include "parallel/slice_loader.h"

namespace tensorpar {

VocabParallelEmbedding::VocabParallelEmbedding(int64_t vocab, int64_t dim, int tp_size,
                                               int tp_rank)
    : vocab_(vocab), dim_(dim), tp_size_(tp_size), rank_(tp_rank),
      range_(::tensorpar::vocab_range(vocab, tp_size, tp_rank)) {
  TP_CHECK(dim_ >= 1, "[VocabParallelEmbedding] dim: got ", dim_, ", expected >= 1");
  weight_ = Tensor::zeros({vocab_local(), dim_}, DType::kF32);
}

void VocabParallelEmbedding::zero_grad() {
  if (d_weight_.numel() > 0) d_weight_.fill_zero();
}

void VocabParallelEmbedding::load(const SliceLoader& table) {
  Tensor w = table(0, range_);
  TP_CHECK(w.shape() == (Shape{vocab_local(), dim_}), "[VocabParallelEmbedding::load] rows ",
           range_str(range_), ": got ", w.describe(), ", expected ",
           shape_str({vocab_local(), dim_}), " (rank ", rank_, ")");
  weight_ = std::move(w);
  d_weight_ = Tensor();
}

void VocabParallelEmbedding::init_normal(float stddev, uint64_t seed, uint64_t tensor_id) {
  weight_ = Tensor::empty({vocab_local(), dim_}, DType::kF32);
  init_normal_sliced(weight_, {vocab_, dim_}, 0, range_, stddev, seed, tensor_id);
  d_weight_ = Tensor();
}

namespace {

void check_ids(const int64_t* ids, int64_t n, int64_t vocab, const char* where) {
  for (int64_t i = 0; i < n; ++i)
    TP_CHECK(ids[i] >= 0 && ids[i] < vocab, "[", where, "] token id ", ids[i], " at row ", i,
             " is outside the vocabulary [0, ", vocab, ")");
}

int64_t check_id_tensor(const Tensor& ids, const char* where) {
  TP_CHECK(ids.dtype() == DType::kI64 && ids.is_contiguous(), "[", where, "] ids: got ",
           ids.describe(), ", expected contiguous i64");
  return ids.numel();
}

}  // namespace

void VocabParallelEmbedding::forward(Tensor& out, const Tensor& ids, Communicator& tp) const {
  forward(out, ids.data<int64_t>(), check_id_tensor(ids, "VocabParallelEmbedding::forward"), tp);
}

void VocabParallelEmbedding::forward(Tensor& out, const int64_t* ids, int64_t n, Communicator& tp) const {
  const char* where = "VocabParallelEmbedding::forward";
  TP_CHECK(tp.size() == tp_size_ && tp.rank() == rank_, "[", where, "] group ", tp.name(),
           " rank ", tp.rank(), " of ", tp.size(), ", expected rank ", rank_, " of ", tp_size_);
  check_ids(ids, n, vocab_, where);
  TP_CHECK(out.dtype() == DType::kF32 && out.is_contiguous() && out.numel() == n * dim_ &&
               out.ndim() >= 1 && out.dim(-1) == dim_,
           "[", where, "] out: got ", out.describe(), ", expected contiguous f32 with ", n,
           " rows of ", dim_);
  if (n == 0) return;
  const DType dt = weight_.dtype();
  if (dt == DType::kF32) {
    embedding_forward_masked(out.data<float>(), ids, weight_.data<float>(), n, range_.begin, range_.end, dim_);
  } else {  // a 16-bit or quantized table: each row widened as it is read
    const int64_t row_bytes = dtype_nbytes(dt, dim_);
    const auto* base = static_cast<const uint8_t*>(weight_.raw());
    std::vector<uint8_t> gguf_row(dtype_is_row_packed(dt) ? size_t(row_bytes) : 0);
    for (int64_t i = 0; i < n; ++i) {
      float* o = out.data<float>() + i * dim_;
      if (!range_.contains(ids[i])) {
        std::memset(o, 0, size_t(dim_) * sizeof(float));
        continue;
      }
      const uint8_t* row = base + (ids[i] - range_.begin) * row_bytes;
      if (dtype_is_panels(dt))
        panel_row_f32(weight_, ids[i] - range_.begin, o);
      else if (dt == DType::kBF16)
        for (int64_t j = 0; j < dim_; ++j) o[j] = bf16_to_f32(reinterpret_cast<const bf16*>(row)[j]);
      else if (dt == DType::kF16)
        for (int64_t j = 0; j < dim_; ++j) o[j] = f16_to_f32(reinterpret_cast<const f16*>(row)[j]);
      else if (dtype_is_row_packed(dt)) {
        int8_packed_row(weight_, ids[i] - range_.begin, gguf_row.data());
        dequantize_row(o, gguf_row.data(), dtype_unpacked(dt), dim_);
      } else {
        dequantize_row(o, row, dt, dim_);
      }
    }
  }
  reduce_from_tp_region_forward(out, tp);
}

void VocabParallelEmbedding::set_row_packed(bool on) { weight_ = row_packed_as(weight_, on); }

void VocabParallelEmbedding::backward(const Tensor& d_out, const Tensor& ids) {
  backward(d_out, ids.data<int64_t>(), check_id_tensor(ids, "VocabParallelEmbedding::backward"));
}

void VocabParallelEmbedding::backward(const Tensor& d_out, const int64_t* ids, int64_t n) {
  const char* where = "VocabParallelEmbedding::backward";
  check_ids(ids, n, vocab_, where);
  TP_CHECK(d_out.dtype() == DType::kF32 && d_out.is_contiguous() && d_out.numel() == n * dim_,
           "[", where, "] d_out: got ", d_out.describe(), ", expected contiguous f32 with ", n,
           " rows of ", dim_);
  TP_CHECK(weight_.dtype() == DType::kF32, "[", where, "] training needs an f32 table; it is ",
           dtype_name(weight_.dtype()), " (load with float weights, not quantized)");
  ensure_grad(d_weight_, {vocab_local(), dim_});
  if (n == 0 || vocab_local() == 0) return;
  embedding_backward_masked(d_weight_.data<float>(), d_out.data<float>(), ids, n, range_.begin, range_.end, dim_);
}

}  // namespace tensorpar
