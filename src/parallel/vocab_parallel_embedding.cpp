// VocabParallelEmbedding (see vocab_parallel_embedding.h).
#include "parallel/vocab_parallel_embedding.h"

#include <utility>

#include "core/error.h"
#include "kernels/cpu/embedding.h"
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
  Tensor w = as_f32(table(0, range_));
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

int64_t check_ids(const Tensor& ids, int64_t vocab, const char* where) {
  TP_CHECK(ids.dtype() == DType::kI64 && ids.is_contiguous(), "[", where, "] ids: got ",
           ids.describe(), ", expected contiguous i64");
  const int64_t* p = ids.data<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    TP_CHECK(p[i] >= 0 && p[i] < vocab, "[", where, "] ids[", i, "]: got ", p[i],
             ", expected in [0, ", vocab, ")");
  return ids.numel();
}

}  // namespace

void VocabParallelEmbedding::forward(Tensor& out, const Tensor& ids, Communicator& tp) const {
  const char* where = "VocabParallelEmbedding::forward";
  TP_CHECK(tp.size() == tp_size_ && tp.rank() == rank_, "[", where, "] group ", tp.name(),
           " rank ", tp.rank(), " of ", tp.size(), ", expected rank ", rank_, " of ", tp_size_);
  const int64_t n = check_ids(ids, vocab_, where);
  TP_CHECK(out.dtype() == DType::kF32 && out.is_contiguous() && out.numel() == n * dim_ &&
               out.ndim() >= 1 && out.dim(-1) == dim_,
           "[", where, "] out: got ", out.describe(), ", expected contiguous f32 with ", n,
           " rows of ", dim_);
  if (n == 0) return;
  embedding_forward_masked(out.data<float>(), ids.data<int64_t>(), weight_.data<float>(), n,
                           range_.begin, range_.end, dim_);
  reduce_from_tp_region_forward(out, tp);
}

void VocabParallelEmbedding::backward(const Tensor& d_out, const Tensor& ids) {
  const char* where = "VocabParallelEmbedding::backward";
  const int64_t n = check_ids(ids, vocab_, where);
  TP_CHECK(d_out.dtype() == DType::kF32 && d_out.is_contiguous() && d_out.numel() == n * dim_,
           "[", where, "] d_out: got ", d_out.describe(), ", expected contiguous f32 with ", n,
           " rows of ", dim_);
  ensure_grad(d_weight_, {vocab_local(), dim_});
  if (n == 0 || vocab_local() == 0) return;
  embedding_backward_masked(d_weight_.data<float>(), d_out.data<float>(), ids.data<int64_t>(), n,
                            range_.begin, range_.end, dim_);
}

}  // namespace tensorpar
