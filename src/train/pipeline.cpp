// The pipeline executor (see pipeline.h).
#include "train/pipeline.h"

#include "core/error.h"

namespace tensorpar {

Pipeline::Pipeline(Transformer& model, Communicator& pp) : model_(model), pp_(pp) {
  const LayerSpan& sp = model.span();
  TP_CHECK(sp.embedding == is_first() && sp.head == is_last(), "[Pipeline] stage ", stage(), " of ", n_stages(),
           " holds layers [", sp.first, ", ", sp.last, ")", sp.embedding ? " with" : " without", " the embedding and",
           sp.head ? " with" : " without", " the head: expected the embedding on the first stage only and the head on ",
           "the last only");
  tied_ = n_stages() > 1 && model.config().tie_embeddings;
  // Collective over pp: every stage takes part, the middle ones in a group of their own.
  if (n_stages() > 1) {
    const bool end = is_first() || is_last();
    auto g = pp.split(end ? 0 : 1, stage());
    if (end && tied_) embedding_ = std::move(g);
  }
}

std::vector<ParamShard> Pipeline::tied_copy() {
  std::vector<ParamShard> out;
  if (!tied_) return out;
  if (is_last()) return model_.tied_head_copy();
  if (!is_first()) return out;
  for (ParamShard& p : model_.parameters())
    if (p.name == "model.embed_tokens.weight" || p.name == "transformer.wte.weight") out.push_back(p);
  TP_ASSERT(out.size() == 1, "the first stage has no embedding parameter");
  return out;
}

std::vector<ParamShard> Pipeline::parameters() {
  std::vector<ParamShard> ps = model_.parameters();
  if (!tied_) return ps;
  if (is_last())
    for (ParamShard& p : model_.tied_head_copy()) ps.push_back(std::move(p));
  if (is_first() || is_last())
    for (ParamShard& p : ps)
      if (p.name == "model.embed_tokens.weight" || p.name == "transformer.wte.weight") p.copies = 2;
  return ps;
}

void Pipeline::reduce_tied_grads() {
  if (!embedding_) return;
  for (ParamShard& p : tied_copy())
    if (p.grad->numel() > 0) embedding_->all_reduce(*p.grad, ReduceOp::kSum);
}

void Pipeline::sync_tied_weights() {
  if (!embedding_) return;
  for (ParamShard& p : tied_copy()) {
    TP_CHECK(p.value->dtype() == DType::kF32, "[Pipeline] the tied embedding ", p.name, " is ",
             dtype_name(p.value->dtype()), ", expected f32 to train");
    if (p.value->numel() > 0) embedding_->broadcast(p.value->raw(), p.value->numel(), DType::kF32, 0);
  }
}

double Pipeline::forward_backward(int64_t n_micro, const MicroBatchFn& batch, float loss_scale) {
  return run(one_f_one_b_schedule(stage(), n_stages(), n_micro), batch, loss_scale, true);
}

double Pipeline::forward_loss(int64_t n_micro, const MicroBatchFn& batch) {
  return run(forward_only_schedule(stage(), n_stages(), n_micro), batch, 0.0f, false);
}

double Pipeline::run(const std::vector<PipeStep>& steps, const MicroBatchFn& batch, float loss_scale,
                     bool with_grad) {
  const int64_t C = model_.config().hidden;
  const int prev = stage() - 1, next = stage() + 1;
  double loss = 0;
  micro_.clear();
  auto get = [&](int64_t m) -> Micro& {
    auto [it, fresh] = micro_.try_emplace(m);
    if (fresh) batch(m, it->second.tokens, it->second.targets);
    return it->second;
  };
  // Rows that cross the boundary: the micro-batch's, or this TP rank's share of them under
  // sequence parallelism (each stage's TP rank r exchanges with the next stage's rank r).
  auto rows = [&](const Micro& mb) { return model_.stage_rows(mb.tokens.dim(0) * mb.tokens.dim(1)); };
  for (const PipeStep& st : steps) {
    Micro& mb = get(st.micro);
    const int64_t N = rows(mb);
    switch (st.op) {
      case PipeOp::kRecvForward:
        ensure_f32(mb.x_in, {N, C});
        pp_.recv(mb.x_in.raw(), N * C, DType::kF32, prev);
        break;
      case PipeOp::kForward:
        loss += model_.stage_forward(st.micro, mb.tokens, is_first() ? nullptr : &mb.x_in, mb.targets,
                                     is_last() ? nullptr : &mb.x_out, with_grad);
        mb.x_in = Tensor{};
        if (!with_grad && is_last()) micro_.erase(st.micro);
        break;
      case PipeOp::kSendForward:
        pp_.send(mb.x_out.raw(), N * C, DType::kF32, next);
        if (!with_grad) micro_.erase(st.micro);
        break;
      case PipeOp::kRecvBackward:
        ensure_f32(mb.d_out, {N, C});
        pp_.recv(mb.d_out.raw(), N * C, DType::kF32, next);
        break;
      case PipeOp::kBackward:
        model_.stage_backward(st.micro, is_last() ? nullptr : &mb.d_out, loss_scale, is_first() ? nullptr : &mb.d_in);
        mb.d_out = Tensor{}, mb.x_out = Tensor{};
        if (is_first()) micro_.erase(st.micro);
        break;
      case PipeOp::kSendBackward:
        pp_.send(mb.d_in.raw(), N * C, DType::kF32, prev);
        micro_.erase(st.micro);
        break;
    }
  }
  TP_ASSERT(micro_.empty(), "micro-batches left in flight after the schedule");
  // The loss lives on the last stage; every stage returns it (bitwise, as bytes).
  if (n_stages() > 1) pp_.broadcast(&loss, int64_t(sizeof(loss)), DType::kU8, n_stages() - 1);
  return loss;
}

}  // namespace tensorpar
