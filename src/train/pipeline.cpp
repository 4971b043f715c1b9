// The pipeline executor (see pipeline.h).
#include "train/pipeline.h"

#include <utility>

#include "core/error.h"

namespace tensorpar {

namespace {

bool is_embedding_name(const std::string& name) {
  return name == "model.embed_tokens.weight" || name == "transformer.wte.weight";
}

}  // namespace

std::vector<LayerSpan> interleaved_layer_spans(int64_t n_layers, int n_stages, int n_chunks, int stage,
                                               std::span<const int64_t> counts) {
  TP_CHECK(n_stages >= 1 && n_chunks >= 1 && stage >= 0 && stage < n_stages, "[interleaved_layer_spans] stage ",
           stage, " of ", n_stages, " with ", n_chunks, " chunks");
  TP_CHECK(n_chunks == 1 || n_stages > 1, "[interleaved_layer_spans] ", n_chunks,
           " model chunks per stage interleave over pipeline stages: expected 2 or more stages, got 1");
  TP_CHECK(n_chunks == 1 || !counts.empty() || n_layers >= int64_t(n_stages) * n_chunks, "[interleaved_layer_spans] ",
           n_layers, " layers over ", n_stages, " stages x ", n_chunks, " chunks: every chunk needs at least one layer ",
           "(lower --pp-virtual or --pp)");
  TP_CHECK(n_chunks == 1 || counts.empty() || int64_t(counts.size()) == int64_t(n_stages) * n_chunks,
           "[interleaved_layer_spans] --pp-layers names ", counts.size(), " counts, expected one per virtual stage: ",
           n_stages, " stages x ", n_chunks, " chunks = ", n_stages * n_chunks);
  const std::vector<LayerSpan> all = split_layers(n_layers, n_stages * n_chunks, counts);
  std::vector<LayerSpan> out;
  for (int v = 0; v < n_chunks; ++v) out.push_back(all[size_t(v * n_stages + stage)]);
  return out;
}

Pipeline::Pipeline(std::vector<Transformer*> chunks, Communicator& pp) : chunks_(std::move(chunks)), pp_(pp) {
  TP_CHECK(!chunks_.empty(), "[Pipeline] stage ", stage(), " holds no model chunk");
  TP_CHECK(n_chunks() == 1 || n_stages() > 1, "[Pipeline] ", n_chunks(),
           " model chunks interleave over pipeline stages: expected 2 or more stages, got 1");
  for (int v = 0; v < n_chunks(); ++v) {
    const LayerSpan& sp = chunks_[size_t(v)]->span();
    const bool first = is_first() && v == 0, last = is_last() && v == n_chunks() - 1;
    TP_CHECK(sp.embedding == first && sp.head == last, "[Pipeline] stage ", stage(), " of ", n_stages(), ", chunk ",
             v, " of ", n_chunks(), " holds layers [", sp.first, ", ", sp.last, ")", sp.embedding ? " with" : " without",
             " the embedding and", sp.head ? " with" : " without",
             " the head: expected the embedding on the first stage's first chunk only and the head on the last "
             "stage's last chunk only");
  }
  // The chunks' released activations in one pool: the stage holds as many as are alive at once.
  for (size_t v = 1; v < chunks_.size(); ++v) chunks_[v]->share_stage_states(*chunks_.front());
  tied_ = n_stages() > 1 && chunks_.front()->config().tie_embeddings;
  // Collective over pp: every stage takes part, the middle ones in a group of their own.
  if (n_stages() > 1) {
    const bool end = is_first() || is_last();
    auto g = pp.split(end ? 0 : 1, stage());
    if (end && tied_) embedding_ = std::move(g);
  }
  if (n_chunks() > 1) {
    activations_ = pp.split(0, stage());
    gradients_ = pp.split(0, stage());
  }
}

void Pipeline::zero_grad() {
  for (Transformer* c : chunks_) c->zero_grad();
}

void Pipeline::set_train_compute(const TrainCompute& compute) {
  for (Transformer* c : chunks_) c->set_train_compute(compute);
}

void Pipeline::set_backward_hook(const std::function<void(int64_t part)>& hook) {
  // Chunk 0 runs each micro-batch's last backward on this stage (the schedule's backward order
  // takes the chunks from the last): the end of backward is its alone.
  for (size_t v = 0; v < chunks_.size(); ++v) {
    if (v == 0 || !hook)
      chunks_[v]->set_backward_hook(hook);
    else
      chunks_[v]->set_backward_hook([hook](int64_t part) {
        if (part != kEndGrads) hook(part);
      });
  }
}

int64_t Pipeline::activation_bytes() const {
  int64_t sum = 0;
  for (const Transformer* c : chunks_) sum += c->activation_bytes();
  return sum;
}

std::vector<ParamShard> Pipeline::model_parameters() {
  std::vector<ParamShard> ps;
  for (Transformer* c : chunks_)
    for (ParamShard& p : c->parameters()) ps.push_back(std::move(p));
  return ps;
}

std::vector<ParamShard> Pipeline::tied_copy() {
  std::vector<ParamShard> out;
  if (!tied_) return out;
  if (is_last()) return chunks_.back()->tied_head_copy();
  if (!is_first()) return out;
  for (ParamShard& p : chunks_.front()->parameters())
    if (is_embedding_name(p.name)) out.push_back(p);
  TP_ASSERT(out.size() == 1, "the first stage has no embedding parameter");
  return out;
}

std::vector<ParamShard> Pipeline::parameters() {
  std::vector<ParamShard> ps = model_parameters();
  if (!tied_) return ps;
  if (is_last())
    for (ParamShard& p : chunks_.back()->tied_head_copy()) ps.push_back(std::move(p));
  if (is_first() || is_last())
    for (ParamShard& p : ps)
      if (is_embedding_name(p.name)) p.copies = 2;
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
  return run(interleaved_schedule(stage(), n_stages(), n_chunks(), n_micro), batch, loss_scale, true);
}

double Pipeline::forward_loss(int64_t n_micro, const MicroBatchFn& batch) {
  return run(interleaved_forward_only_schedule(stage(), n_stages(), n_chunks(), n_micro), batch, 0.0f, false);
}

double Pipeline::run(const std::vector<PipeStep>& steps, const MicroBatchFn& batch, float loss_scale,
                     bool with_grad) {
  const int64_t C = chunks_.front()->config().hidden;
  const int P = n_stages(), V = n_chunks();
  Communicator& acts = activations_ ? *activations_ : pp_;
  Communicator& grads = gradients_ ? *gradients_ : pp_;
  double loss = 0;
  struct Batch {
    Tensor tokens, targets;
  };
  std::map<int64_t, Batch> batches;  // drawn once, read by every chunk
  // A (chunk, micro-batch)'s transfers, while it is in flight on this stage.
  struct Flow {
    Tensor x_in, x_out, d_out, d_in;
  };
  std::map<std::pair<int, int64_t>, Flow> flows;
  for (const PipeStep& st : steps) {
    auto [it, fresh] = batches.try_emplace(st.micro);
    if (fresh) batch(st.micro, it->second.tokens, it->second.targets);
    const Batch& mb = it->second;
    Transformer& model = *chunks_[size_t(st.chunk)];
    const bool first = is_first() && st.chunk == 0, last = is_last() && st.chunk == V - 1;
    const std::pair<int, int64_t> key{st.chunk, st.micro};
    Flow& f = flows[key];
    // Rows that cross the boundary: the micro-batch's, or this TP rank's share of them under
    // sequence parallelism (each stage's TP rank r exchanges with the next stage's rank r).
    const int64_t N = model.stage_rows(mb.tokens.dim(0) * mb.tokens.dim(1));
    const int prev = interleaved_prev_stage(stage(), P, st.chunk, V), next = interleaved_next_stage(stage(), P, st.chunk, V);
    switch (st.op) {
      case PipeOp::kRecvForward:
        ensure_f32(f.x_in, {N, C});
        acts.recv(f.x_in.raw(), N * C, DType::kF32, prev);
        break;
      case PipeOp::kForward:
        loss += model.stage_forward(st.micro, mb.tokens, first ? nullptr : &f.x_in, mb.targets,
                                    last ? nullptr : &f.x_out, with_grad);
        f.x_in = Tensor{};
        if (!with_grad && last) flows.erase(key);
        break;
      case PipeOp::kSendForward:
        acts.send(f.x_out.raw(), N * C, DType::kF32, next);
        f.x_out = Tensor{};
        if (!with_grad) flows.erase(key);
        break;
      case PipeOp::kRecvBackward:
        ensure_f32(f.d_out, {N, C});
        grads.recv(f.d_out.raw(), N * C, DType::kF32, next);
        break;
      case PipeOp::kBackward:
        model.stage_backward(st.micro, last ? nullptr : &f.d_out, loss_scale, first ? nullptr : &f.d_in);
        f.d_out = Tensor{};
        if (first) flows.erase(key);
        break;
      case PipeOp::kSendBackward:
        grads.send(f.d_in.raw(), N * C, DType::kF32, prev);
        flows.erase(key);
        break;
    }
  }
  TP_ASSERT(flows.empty(), "micro-batches left in flight after the schedule");
  // The loss lives on the last stage; every stage returns it (bitwise, as bytes).
  if (P > 1) pp_.broadcast(&loss, int64_t(sizeof(loss)), DType::kU8, P - 1);
  return loss;
}

}  // namespace tensorpar
