// StepPlan encoding and the per-rank step (see step_plan.h).
#include "infer/step_plan.h"

#include <algorithm>
#include <bit>

#include "core/error.h"

namespace tensorpar {

namespace {

class Writer {
 public:
  void i(int64_t v) { w_.push_back(v); }
  void f(float v) { w_.push_back(int64_t(std::bit_cast<int32_t>(v))); }
  void d(double v) { w_.push_back(std::bit_cast<int64_t>(v)); }
  void ids(const std::vector<int32_t>& v) {
    i(int64_t(v.size()));
    for (int32_t x : v) i(x);
  }
  std::vector<int64_t> take() { return std::move(w_); }

 private:
  std::vector<int64_t> w_;
};

class Reader {
 public:
  explicit Reader(const std::vector<int64_t>& w) : w_(w) {}
  int64_t i() {
    TP_CHECK(at_ < w_.size(), "[decode_plan] truncated plan of ", w_.size(), " words");
    return w_[at_++];
  }
  float f() { return std::bit_cast<float>(int32_t(i())); }
  double d() { return std::bit_cast<double>(i()); }
  int64_t count(int64_t max) {
    const int64_t n = i();
    TP_CHECK(n >= 0 && n <= max && n <= int64_t(w_.size() - at_), "[decode_plan] count ", n, " out of range");
    return n;
  }
  std::vector<int32_t> ids() {
    std::vector<int32_t> v(size_t(count(int64_t(1) << 30)));
    for (int32_t& x : v) x = int32_t(i());
    return v;
  }
  bool done() const { return at_ == w_.size(); }

 private:
  const std::vector<int64_t>& w_;
  size_t at_ = 0;
};

}  // namespace

std::vector<int64_t> encode_plan(const StepPlan& plan) {
  Writer w;
  w.i(int64_t(plan.kind));
  w.i(int64_t(plan.seqs.size()));
  for (const StepSeq& s : plan.seqs) {
    w.i(s.id);
    w.i(s.pos0);
    w.ids(s.tokens);
    w.ids(s.blocks);
    w.i(s.sample);
    if (!s.sample) continue;
    const RowSampling& r = s.sampling;
    w.f(r.params.temperature);
    w.i(r.params.top_k);
    w.f(r.params.top_p);
    w.f(r.params.min_p);
    w.d(r.u);
    w.f(r.params.repetition_penalty);
    w.f(r.params.frequency_penalty);
    w.f(r.params.presence_penalty);
    w.i(r.top_logprobs);
    w.i(int64_t(r.counts.size()));
    for (const auto& [tok, n] : r.counts) {
      w.i(tok);
      w.i(n);
    }
  }
  return w.take();
}

StepPlan decode_plan(const std::vector<int64_t>& words) {
  Reader r(words);
  StepPlan p;
  const int64_t kind = r.i();
  TP_CHECK(kind >= 1 && kind <= 3, "[decode_plan] unknown plan kind ", kind);
  p.kind = StepPlan::Kind(kind);
  p.seqs.resize(size_t(r.count(int64_t(1) << 20)));
  for (StepSeq& s : p.seqs) {
    s.id = r.i();
    s.pos0 = r.i();
    s.tokens = r.ids();
    s.blocks = r.ids();
    s.sample = r.i() != 0;
    if (!s.sample) continue;
    RowSampling& x = s.sampling;
    x.params.temperature = r.f();
    x.params.top_k = int(r.i());
    x.params.top_p = r.f();
    x.params.min_p = r.f();
    x.u = r.d();
    x.params.repetition_penalty = r.f();
    x.params.frequency_penalty = r.f();
    x.params.presence_penalty = r.f();
    x.top_logprobs = int(r.i());
    x.counts.resize(size_t(r.count(int64_t(1) << 30)));
    for (auto& [tok, n] : x.counts) {
      tok = int32_t(r.i());
      n = int32_t(r.i());
    }
  }
  TP_CHECK(r.done(), "[decode_plan] trailing words after the plan");
  return p;
}

StepPlan broadcast_plan(const StepPlan& plan, Communicator& tp, int root) {
  if (tp.size() == 1) return plan;
  std::vector<int64_t> words;
  if (tp.rank() == root) words = encode_plan(plan);
  int64_t n = int64_t(words.size());
  tp.broadcast(&n, 1, DType::kI64, root);
  words.resize(size_t(n));
  tp.broadcast(words.data(), n, DType::kI64, root);
  return tp.rank() == root ? plan : decode_plan(words);
}

std::vector<RowSample> StepRunner::run(const StepPlan& plan) {
  chunks_.clear();
  rows_.clear();
  for (const StepSeq& s : plan.seqs) {
    SeqChunk c;
    c.tokens = s.tokens;
    c.pos0 = s.pos0;
    c.blocks = s.blocks;
    c.logits = s.sample ? LogitRows::kLast : LogitRows::kNone;
    chunks_.push_back(c);
    if (s.sample) rows_.push_back(s.sampling);
  }
  if (chunks_.empty()) return {};
  const Range vocab = model_.vocab_range();
  const int64_t R = int64_t(rows_.size());
  if (logits_.ndim() == 0 || logits_.dim(0) < R) logits_ = Tensor::empty({std::max<int64_t>(R, 16), vocab.size()}, DType::kF32);
  Tensor logits = logits_.slice(0, 0, R);
  model_.forward_batch(logits, chunks_, pool_);
  return sample_batch(logits, vocab, rows_, model_.tp());
}

}  // namespace tensorpar
