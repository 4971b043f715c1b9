// The serving engine (see engine.h). Rank 0's run() is the scheduler loop: take new requests,
// drop cancelled ones, build a step plan, broadcast it, run it like every other rank, then turn
// the sampled tokens into text (EOS, stop strings, max_tokens) and metrics. Other ranks loop on
// broadcast plans. An idle rank 0 broadcasts an idle plan every idle_heartbeat_s, so waiting
// ranks sleep in the broadcast without reaching the collective timeout.
#include "serve/engine.h"

#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <algorithm>
#include <cmath>

#include "comm/timed_communicator.h"
#include "core/error.h"
#include "infer/step_plan.h"
#include "infer/stop_matcher.h"
#include "serve/scheduler.h"

namespace tensorpar {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Rank 0's view of a request beyond scheduling: where its text goes and its timings.
struct Output {
  std::shared_ptr<RequestHandle> handle;
  std::optional<StreamDecoder> decoder;
  std::optional<StopMatcher> matcher;
  Clock::time_point arrival, last_token;
  bool first_token = false;
  std::vector<int32_t> unsent_tokens;  // the last token, when its chunk went with the final one
};

// Chunked prefill paced for the decode streams (Sarathi-Serve's idea): from measured step times
// it keeps a step that carries prompt rows within kItlRatio x a decode-only step, so running
// streams' inter-token latency stays steady while long prompts keep arriving. Estimates are
// running averages: a decode-only step's time, and the extra time per prompt row.
class StepPacer {
 public:
  static constexpr double kItlRatio = 2.0;
  static constexpr int64_t kMinChunk = 16;  // prompts always advance by at least this much

  int64_t prefill_cap(int64_t max_batch_tokens) const {
    if (decode_s_ <= 0 || row_s_ <= 0) return max_batch_tokens;  // not measured yet
    const double rows = (kItlRatio - 1.0) * decode_s_ / row_s_;
    return std::clamp<int64_t>(int64_t(rows), kMinChunk, max_batch_tokens);
  }
  void observe(double step_s, int64_t decode_rows, int64_t prefill_rows) {
    constexpr double a = 0.2;
    if (prefill_rows == 0) {
      decode_s_ = decode_s_ <= 0 ? step_s : (1 - a) * decode_s_ + a * step_s;
    } else if (decode_s_ > 0) {
      const double per_row = std::max(0.0, step_s - (decode_rows > 0 ? decode_s_ : 0.0)) / double(prefill_rows);
      row_s_ = row_s_ <= 0 ? per_row : (1 - a) * row_s_ + a * per_row;
    }
  }

 private:
  double decode_s_ = 0, row_s_ = 0;
};

int64_t pool_blocks(const EngineOptions& o, int64_t ctx, int64_t bytes_per_token) {
  const int64_t per_block = std::max<int64_t>(1, bytes_per_token * o.block_size);
  const int64_t per_seq = (ctx + o.block_size - 1) / o.block_size;
  int64_t blocks;
  if (o.kv_cache_mb > 0) {
    blocks = o.kv_cache_mb * (int64_t(1) << 20) / per_block;
  } else {  // every running sequence at full context, within 2 GiB
    blocks = std::min(o.max_seqs * per_seq, (int64_t(2) << 30) / per_block);
  }
  TP_CHECK(blocks >= per_seq, "[serve] the KV pool of ", blocks, " blocks (", blocks * o.block_size,
           " tokens) cannot hold one sequence of the context ", ctx, ": raise --kv-cache-mb (",
           per_seq * per_block / (1 << 20) + 1, " MiB per full context on a rank) or lower --ctx");
  return blocks;
}

}  // namespace

struct Engine::Impl {
  CausalLM& model;
  const Tokenizer* tok;
  EngineOptions opts;
  std::unique_ptr<KvPool> pool;
  std::unique_ptr<Scheduler> sched;  // rank 0

  std::mutex mu;  // guards incoming, next_id, stopping, deadline
  std::condition_variable cv;
  std::deque<std::pair<std::unique_ptr<Sequence>, Output>> incoming;
  int64_t queued = 0;  // the scheduler's waiting sequences, as of the loop's last look
  int64_t next_id = 1;
  bool stopping = false;
  Clock::time_point deadline;

  std::map<int64_t, Output> outputs;  // rank 0 loop only

  Impl(CausalLM& m, const Tokenizer* t, const EngineOptions& o) : model(m), tok(t), opts(o) {}

  void finish(Engine& e, int64_t id, const std::string& reason, const std::string& error = {});
  void emit(Engine& e, Sequence& s, const RowSample& x);
  void run_leader(Engine& e);
  void run_follower(Engine& e);
  // Runs a plan on this rank, then gathers every rank's (collective, compute) seconds of it to
  // the metrics (one small all_gather; rank 0 records). Collective over model.control().
  std::vector<RowSample> step(Engine& e, StepRunner& runner, const StepPlan& plan);
};

Engine::Engine(CausalLM& model, const Tokenizer* tokenizer, const EngineOptions& options)
    : impl_(std::make_unique<Impl>(model, tokenizer, options)), metrics_(std::make_unique<ServeMetrics>()) {
  Communicator& tp = model.control();
  TP_CHECK(tp.rank() != 0 || tokenizer, "[Engine] rank 0 needs the tokenizer");
  const EngineOptions& o = options;
  TP_CHECK(o.max_seqs >= 1 && o.max_batch_tokens >= o.max_seqs && o.block_size >= 1 && o.max_queue >= 1,
           "[Engine] options: max_seqs ", o.max_seqs, ", max_batch_tokens ", o.max_batch_tokens, " (>= max_seqs), block ",
           o.block_size, ", max_queue ", o.max_queue);
  const ModelConfig& c = model.config();
  const int64_t model_ctx = c.max_position > 0 ? c.max_position : 4096;
  ctx_ = o.ctx > 0 ? o.ctx : std::min<int64_t>(model_ctx, 4096);
  TP_CHECK(ctx_ >= 2 && (c.family != ArchFamily::kGpt2 || ctx_ <= c.max_position), "[Engine] context ", ctx_,
           c.family == ArchFamily::kGpt2 ? " must be in [2, " + std::to_string(model_ctx) + "] for this model"
                                         : std::string(" must be at least 2"));
  // Every rank sizes the pool for the rank holding the most kv heads, so block ids agree.
  int64_t bpt = model.kv_bytes_per_token();
  if (tp.size() > 1) tp.all_reduce(&bpt, &bpt, 1, DType::kI64, ReduceOp::kMax);
  int64_t n_blocks = pool_blocks(o, ctx_, bpt);
  if (tp.size() > 1) tp.all_reduce(&n_blocks, &n_blocks, 1, DType::kI64, ReduceOp::kMin);  // block ids must agree
  impl_->pool = model.make_kv_pool(n_blocks, o.block_size);
  if (tp.rank() == 0) {
    SchedulerOptions so;
    so.max_seqs = o.max_seqs;
    so.max_batch_tokens = o.max_batch_tokens;
    so.block_size = o.block_size;
    so.n_blocks = n_blocks;
    so.prefix_caching = o.prefix_caching;
    impl_->sched = std::make_unique<Scheduler>(so);
    metrics_->kv_blocks_total = n_blocks;
  }
  {
    std::lock_guard lock(metrics_->rank_mu);
    metrics_->rank_comm_s.assign(size_t(tp.size()), 0.0);
    metrics_->rank_compute_s.assign(size_t(tp.size()), 0.0);
  }
}

Engine::~Engine() = default;

std::shared_ptr<RequestHandle> Engine::submit(std::vector<int32_t> prompt, const GenerationParams& params) {
  Impl& im = *impl_;
  TP_CHECK(im.model.control().rank() == 0, "[Engine::submit] only rank 0 takes requests");
  if (prompt.empty()) throw SubmitError(400, "the prompt is empty");
  const int64_t V = im.model.config().vocab_size;
  for (int32_t id : prompt)
    if (id < 0 || id >= V)
      throw SubmitError(400, "prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                 std::to_string(V) + ")");
  if (params.max_tokens < 1) throw SubmitError(400, "max_tokens must be at least 1");
  try {
    validate(params.sampling);
  } catch (const Error& e) {
    throw SubmitError(400, e.what());
  }
  if (params.top_logprobs > 20) throw SubmitError(400, "top_logprobs must be at most 20");
  if (params.max_tokens > ctx_ - int64_t(prompt.size()))
    throw SubmitError(400, "this model's context is " + std::to_string(ctx_) + " tokens; the prompt has " +
                               std::to_string(prompt.size()) + " tokens and max_tokens is " +
                               std::to_string(params.max_tokens) + " (" +
                               std::to_string(int64_t(prompt.size()) + params.max_tokens) + " in all)");
  auto seq = std::make_unique<Sequence>();
  seq->n_prompt = int64_t(prompt.size());
  seq->tokens = std::move(prompt);
  seq->params = params;
  // top_k at or above the vocabulary keeps every token: off (and no top-k sized buffers).
  if (seq->params.sampling.top_k >= V) seq->params.sampling.top_k = 0;
  // The caller's seed, 0 included (HTTP draws one if none).
  seq->sampler.emplace(seq->params.sampling, seq->tokens);
  Output out;
  out.arrival = Clock::now();
  out.decoder.emplace(*im.tok);
  out.matcher.emplace(params.stop);
  std::shared_ptr<RequestHandle> handle;
  {
    std::lock_guard lock(im.mu);
    const State st = state_.load();
    if (st != State::kRunning && st != State::kStarting)
      throw SubmitError(503, st == State::kFailed ? "the engine failed" : "the server is shutting down");
    if (im.stopping) throw SubmitError(503, "the server is shutting down");
    if (im.queued + int64_t(im.incoming.size()) >= im.opts.max_queue)
      throw SubmitError(429, "the queue is full (" + std::to_string(im.opts.max_queue) + " waiting requests)");
    seq->id = im.next_id++;
    handle = std::make_shared<RequestHandle>(seq->id);
    out.handle = handle;
    im.incoming.emplace_back(std::move(seq), std::move(out));
  }
  ++metrics_->requests_total;
  im.cv.notify_all();
  return handle;
}

void Engine::stop(double grace_s) {
  {
    std::lock_guard lock(impl_->mu);
    const auto d = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
    if (!impl_->stopping || d < impl_->deadline) impl_->deadline = d;
    impl_->stopping = true;
  }
  State s = State::kRunning;
  state_.compare_exchange_strong(s, State::kDraining);
  s = State::kStarting;
  state_.compare_exchange_strong(s, State::kDraining);
  impl_->cv.notify_all();
}

void Engine::Impl::finish(Engine& e, int64_t id, const std::string& reason, const std::string& error) {
  auto it = outputs.find(id);
  Sequence* s = sched->find(id);
  if (it != outputs.end()) {
    Output& o = it->second;
    StreamChunk c;
    if (reason != "error" && reason != "abort" && o.matcher) {
      // The held-back text is final now (no stop string completed).
      bool stopped = false;
      c.text = o.matcher->push(o.decoder->flush(), stopped);
      if (!stopped) c.text += o.matcher->finish();
    }
    c.tokens = std::move(o.unsent_tokens);
    c.finished = true;
    c.finish_reason = reason;
    c.error = error;
    if (s) {
      c.prompt_tokens = s->n_prompt;
      c.completion_tokens = s->generated();
      c.cached_prompt_tokens = s->cached_prompt_tokens;
    }
    // Metrics first: a client that reads /metrics right after its answer sees it counted.
    e.metrics_->e2e.observe(since(o.arrival));
    if (reason == "abort") ++e.metrics_->requests_aborted;
    if (reason == "error") ++e.metrics_->requests_failed;
    o.handle->push(std::move(c));
    outputs.erase(it);
  }
  sched->finish(id);
}

void Engine::Impl::emit(Engine& e, Sequence& s, const RowSample& x) {
  Output& o = outputs.at(s.id);
  ServeMetrics& m = *e.metrics_;
  ++m.generation_tokens;
  if (!o.first_token) {
    o.first_token = true;
    m.ttft.observe(since(o.arrival));
  } else {
    m.inter_token.observe(since(o.last_token));
  }
  o.last_token = Clock::now();
  const bool eos = !s.params.ignore_eos && tok->is_eos(x.token);
  StreamChunk c;
  c.tokens.push_back(x.token);
  if (s.params.top_logprobs >= 0) c.logprobs.push_back({x.token, x.logprob, x.top});
  bool stopped = false;
  if (!eos) c.text = o.matcher->push(o.decoder->push(x.token), stopped);
  const bool done = eos || stopped || s.generated() >= s.params.max_tokens || int64_t(s.tokens.size()) >= e.ctx_;
  if (!c.text.empty() || !c.logprobs.empty() || !done) {
    o.handle->push(std::move(c));
  } else {
    // Its text is held back (a partial UTF-8 character) or empty: the final chunk carries it.
    o.unsent_tokens = std::move(c.tokens);
  }
  if (eos || stopped) {
    if (stopped) o.matcher.reset();  // nothing after a stop string is released
    finish(e, s.id, "stop");
  } else if (done) {
    finish(e, s.id, "length");
  }
}

void Engine::Impl::run_leader(Engine& e) {
  Communicator& tp = model.control();
  StepRunner runner(model, *pool);
  StepPacer pacer;
  ServeMetrics& m = *e.metrics_;
  std::vector<double> times(size_t(2 * tp.size()));
  for (;;) {
    bool stop_now = false;
    {
      std::unique_lock lock(mu);
      if (incoming.empty() && sched->running() == 0 && sched->waiting() == 0 && !stopping)
        cv.wait_for(lock, std::chrono::duration<double>(opts.idle_heartbeat_s));
      while (!incoming.empty()) {
        auto& [seq, out] = incoming.front();
        const int64_t id = seq->id;
        m.prompt_tokens += seq->n_prompt;
        outputs.emplace(id, std::move(out));
        sched->add(std::move(seq));
        incoming.pop_front();
      }
      queued = sched->waiting();
      if (stopping && (Clock::now() >= deadline || (sched->running() == 0 && sched->waiting() == 0))) stop_now = true;
    }
    for (int64_t id : sched->ids())
      if (outputs.at(id).handle->cancelled()) finish(e, id, "abort");
    if (stop_now) {
      for (int64_t id : sched->ids()) finish(e, id, "abort");
      StepPlan stop;
      stop.kind = StepPlan::Kind::kStop;
      broadcast_plan(stop, tp);
      return;
    }
    const StepPlan plan = sched->plan(pacer.prefill_cap(opts.max_batch_tokens));
    {
      std::lock_guard lock(mu);
      queued = sched->waiting();
    }
    m.running = sched->running();
    m.waiting = sched->waiting();
    m.kv_blocks_used = sched->blocks().used_blocks();
    m.preemptions = sched->preemptions();
    m.prefix_query_tokens = sched->prefix_query_tokens();
    m.prefix_hit_tokens = sched->prefix_hit_tokens();
    if (plan.kind != StepPlan::Kind::kRun) {
      broadcast_plan(plan, tp);
      continue;
    }
    int64_t rows = 0, prefill_rows = 0;  // prompt rows: all but the one-token rows that sample (decode)
    for (const StepSeq& r : plan.seqs) {
      rows += int64_t(r.tokens.size());
      if (!(r.sample && r.tokens.size() == 1)) prefill_rows += int64_t(r.tokens.size());
      if (!sched->find(r.id)->admitted) m.queue_time.observe(since(outputs.at(r.id).arrival));
    }
    broadcast_plan(plan, tp);
    const auto t_step = Clock::now();
    const std::vector<RowSample> samples = step(e, runner, plan);
    pacer.observe(since(t_step), rows - prefill_rows, prefill_rows);
    m.batch_rows.observe(double(rows));
    ++m.steps;
    for (auto& [s, x] : sched->apply(plan, samples)) {
      try {
        emit(e, *s, *x);
      } catch (const std::exception& ex) {  // e.g. a token the tokenizer cannot spell: this request only
        if (outputs.count(s->id)) finish(e, s->id, "error", ex.what());
      }
    }
    m.running = sched->running();  // requests that just finished no longer count
    m.waiting = sched->waiting();
    m.kv_blocks_used = sched->blocks().used_blocks();
  }
}

std::vector<RowSample> Engine::Impl::step(Engine& e, StepRunner& runner, const StepPlan& plan) {
  Communicator& tp = model.control();
  const auto* timed = dynamic_cast<const TimedCommunicator*>(&tp);
  const double c0 = timed ? timed->seconds() : 0;
  const auto t0 = Clock::now();
  std::vector<RowSample> samples = runner.run(plan);
  const double total = since(t0), comm = timed ? timed->seconds() - c0 : 0;
  const int64_t mine[2] = {std::bit_cast<int64_t>(comm), std::bit_cast<int64_t>(total - comm)};
  std::vector<int64_t> all(size_t(2 * tp.size()));
  if (tp.size() > 1)
    tp.all_gather(mine, all.data(), 2, DType::kI64);
  else
    all.assign(mine, mine + 2);
  if (tp.rank() == 0) {
    std::lock_guard lock(e.metrics_->rank_mu);
    for (int r = 0; r < tp.size(); ++r) {
      e.metrics_->rank_comm_s[size_t(r)] += std::bit_cast<double>(all[size_t(2 * r)]);
      e.metrics_->rank_compute_s[size_t(r)] += std::bit_cast<double>(all[size_t(2 * r + 1)]);
    }
  }
  return samples;
}

void Engine::Impl::run_follower(Engine& e) {
  Communicator& tp = model.control();
  StepRunner runner(model, *pool);
  for (;;) {
    const StepPlan plan = broadcast_plan(StepPlan{}, tp);
    if (plan.kind == StepPlan::Kind::kStop) return;
    if (plan.kind == StepPlan::Kind::kRun) step(e, runner, plan);
  }
}

void Engine::run() {
  Impl& im = *impl_;
  const bool leader = im.model.control().rank() == 0;
  State s = State::kStarting;
  state_.compare_exchange_strong(s, State::kRunning);
  try {
    if (leader)
      im.run_leader(*this);
    else
      im.run_follower(*this);
    state_ = State::kStopped;
  } catch (const std::exception& ex) {
    state_ = State::kFailed;
    if (leader) {
      std::lock_guard lock(im.mu);
      for (auto& [seq, out] : im.incoming) im.outputs.emplace(seq->id, std::move(out));
      im.incoming.clear();
      for (auto& [id, out] : im.outputs) {
        ++metrics_->requests_failed;
        metrics_->e2e.observe(since(out.arrival));
        StreamChunk c;
        c.finished = true;
        c.finish_reason = "error";
        c.error = ex.what();
        out.handle->push(std::move(c));
      }
      im.outputs.clear();
    }
    throw;
  }
}

}  // namespace tensorpar
