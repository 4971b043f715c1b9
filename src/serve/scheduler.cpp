// The scheduler (see scheduler.h). Sequences are ordered by id (= arrival), so "youngest" is the
// largest id and preemption always falls on the request that has waited least.
#include "serve/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace tensorpar {

Scheduler::Scheduler(const SchedulerOptions& o)
    : options_(o), blocks_(o.n_blocks, o.block_size, o.prefix_caching) {
  TP_CHECK(o.max_seqs >= 1 && o.max_batch_tokens >= o.max_seqs, "[Scheduler] max_batch_tokens ", o.max_batch_tokens,
           " must be at least max_seqs ", o.max_seqs, " (every running sequence decodes one row per step)");
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  TP_CHECK(seq && !seq->tokens.empty(), "[Scheduler::add] a sequence without tokens");
  TP_CHECK(!seqs_.count(seq->id), "[Scheduler::add] sequence ", seq->id, " is already queued");
  Sequence* s = seq.get();
  seqs_[s->id] = std::move(seq);
  waiting_.push_back(s);
}

Sequence* Scheduler::find(int64_t id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

std::vector<int64_t> Scheduler::ids() const {
  std::vector<int64_t> out;
  for (const Sequence* s : running_) out.push_back(s->id);
  for (const Sequence* s : waiting_) out.push_back(s->id);
  return out;
}

bool Scheduler::grow(Sequence& s, int64_t tokens) {
  const int64_t need = (tokens + options_.block_size - 1) / options_.block_size;
  while (int64_t(s.blocks.size()) < need) {
    const int32_t b = blocks_.allocate();
    if (b < 0) return false;
    s.blocks.push_back(b);
  }
  return true;
}

void Scheduler::free_blocks(Sequence& s) {
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) blocks_.release(*it);
  s.blocks.clear();
  s.computed = 0;
  s.committed = 0;
}

bool Scheduler::preempt_youngest(const Sequence* keep) {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    Sequence* v = *it;
    if (v == keep) continue;
    free_blocks(*v);
    ++v->preemptions;
    ++preemptions_;
    running_.erase(std::next(it).base());
    waiting_.push_front(v);
    return true;
  }
  return false;
}

StepSeq Scheduler::row(Sequence& s, int64_t n) {
  StepSeq r;
  r.id = s.id;
  r.pos0 = s.computed;
  r.tokens.assign(s.tokens.begin() + s.computed, s.tokens.begin() + s.computed + n);
  r.blocks = s.blocks;
  r.sample = s.computed + n == int64_t(s.tokens.size());
  if (r.sample) {
    r.sampling = s.sampler->next_row(s.params.top_logprobs);
  }
  return r;
}

StepPlan Scheduler::plan(int64_t prefill_cap) {
  StepPlan p;
  int64_t budget = options_.max_batch_tokens;
  std::vector<std::pair<Sequence*, int64_t>> picked;  // (sequence, rows), plan order
  // 1. Decode rows, oldest first; a full pool preempts the youngest.
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* s = running_[i];
    if (int64_t(s->tokens.size()) - s->computed != 1) continue;
    bool ok = grow(*s, s->computed + 1);
    while (!ok) {
      // The youngest is last; preempting it never touches sequences already picked (older).
      if (running_.back() == s) break;
      preempt_youngest(s);
      ok = grow(*s, s->computed + 1);
    }
    if (!ok) {  // s itself is the youngest: it yields
      preempt_youngest(nullptr);
      break;
    }
    picked.emplace_back(s, 1);
    --budget;
  }
  if (!picked.empty()) budget = std::min(budget, std::max<int64_t>(1, prefill_cap));
  // 2. Prefill chunks of running prompts (arrival order).
  for (Sequence* s : running_) {
    const int64_t pending = int64_t(s->tokens.size()) - s->computed;
    if (pending <= 1 || budget <= 0) continue;
    int64_t n = std::min(pending, budget);
    if (!grow(*s, s->computed + n)) n = int64_t(s->blocks.size()) * options_.block_size - s->computed;
    if (n <= 0) continue;
    picked.emplace_back(s, n);
    budget -= n;
  }
  // 3. Admissions, first come first served, while their blocks fit.
  while (!waiting_.empty() && int64_t(running_.size()) < options_.max_seqs && budget > 0) {
    Sequence* s = waiting_.front();
    const int64_t T = int64_t(s->tokens.size());
    std::vector<int32_t> hit = blocks_.match_prefix(s->tokens, T - 1);
    const int64_t need = (T + options_.block_size - 1) / options_.block_size - int64_t(hit.size());
    if (need > blocks_.free_blocks()) {
      for (auto it = hit.rbegin(); it != hit.rend(); ++it) blocks_.release(*it);
      break;
    }
    waiting_.pop_front();
    s->blocks = std::move(hit);
    s->computed = int64_t(s->blocks.size()) * options_.block_size;
    s->committed = int64_t(s->blocks.size());
    if (!s->admitted) {
      s->cached_prompt_tokens = s->computed;
      prefix_query_ += s->n_prompt;
      prefix_hit_ += s->computed;
    }
    running_.insert(std::upper_bound(running_.begin(), running_.end(), s,
                                     [](const Sequence* a, const Sequence* b) { return a->id < b->id; }),
                    s);
    int64_t n = std::min(T - s->computed, budget);
    if (!grow(*s, s->computed + n)) n = int64_t(s->blocks.size()) * options_.block_size - s->computed;
    if (n <= 0) continue;
    picked.emplace_back(s, n);
    budget -= n;
  }
  if (picked.empty()) return p;
  p.kind = StepPlan::Kind::kRun;
  for (auto& [s, n] : picked) p.seqs.push_back(row(*s, n));
  return p;
}

std::vector<std::pair<Sequence*, const RowSample*>> Scheduler::apply(const StepPlan& plan,
                                                                     std::span<const RowSample> samples) {
  std::vector<std::pair<Sequence*, const RowSample*>> out;
  size_t k = 0;
  for (const StepSeq& r : plan.seqs) {
    Sequence* s = find(r.id);
    TP_ASSERT(s != nullptr && s->computed == r.pos0);
    s->admitted = true;
    s->computed += int64_t(r.tokens.size());
    // Blocks now full (with computed keys) can serve later prompts.
    for (int64_t end = (s->committed + 1) * options_.block_size; end <= s->computed;
         end += options_.block_size, ++s->committed)
      blocks_.commit_full_block(s->blocks[size_t(s->committed)], std::span<const int32_t>(s->tokens.data(), size_t(end)));
    if (!r.sample) continue;
    TP_ASSERT(k < samples.size());
    const RowSample& x = samples[k++];
    s->tokens.push_back(x.token);
    s->sampler->accept(x.token);
    out.emplace_back(s, &x);
  }
  return out;
}

void Scheduler::finish(int64_t id) {
  Sequence* s = find(id);
  if (!s) return;
  free_blocks(*s);
  running_.erase(std::remove(running_.begin(), running_.end(), s), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), s), waiting_.end());
  seqs_.erase(id);
}

}  // namespace tensorpar
