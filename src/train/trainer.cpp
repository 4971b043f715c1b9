// Trainer: accumulate, clip, step, evaluate, checkpoint.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "io/sharded_checkpoint.h"
#include "train/hf_export.h"

namespace tensorpar {

namespace {
constexpr uint64_t kTrainStream = 0, kValStream = 1;

void add_expert_load(std::vector<std::vector<double>>& sum, const std::vector<std::vector<double>>& load) {
  if (sum.empty()) {
    sum = load;
    return;
  }
  for (size_t l = 0; l < sum.size() && l < load.size(); ++l)
    for (size_t e = 0; e < sum[l].size() && e < load[l].size(); ++e) sum[l][e] += load[l][e];
}
}  // namespace

Trainer::Trainer(CausalLM& model, const TokenCorpus& corpus, const TrainOptions& opt, Communicator* dp,
                 Pipeline* pipeline, Communicator* ep, Communicator* edp)
    : model_(model),
      corpus_(corpus),
      o_(opt),
      dp_(dp),
      pipeline_(pipeline),
      ep_(ep),
      edp_(edp),
      opt_(opt.adam),
      monitor_(opt.divergence),
      skipped_(merge_skipped({}, opt.skip_batches)) {
  TP_CHECK(!ep_ || (dp_ && edp_ && !pipeline_), "[Trainer] expert parallelism over data-parallel ranks needs the ",
           "dp and edp groups and no pipeline");
  TP_CHECK(!pipeline_ || &pipeline_->chunk(0) == &model, "[Trainer] the pipeline runs another model");
  if (dp_) dp_size_ = dp_->size(), dp_rank_ = dp_->rank();
  if (o_.micro_batch <= 0) o_.micro_batch = std::max<int64_t>(1, o_.batch / dp_size_);
  TP_CHECK(o_.batch >= 1 && o_.batch % (o_.micro_batch * dp_size_) == 0, "[Trainer] batch ", o_.batch,
           " is not a multiple of micro_batch ", o_.micro_batch, " x dp ", dp_size_);
  if (pipeline_ && pipeline_->n_chunks() > 1) {
    const int64_t mine = o_.batch / o_.micro_batch / dp_size_, P = pipeline_->n_stages();
    TP_CHECK(mine % P == 0, "[Trainer] the interleaved pipeline schedule (", pipeline_->n_chunks(),
             " chunks per stage) needs the micro-batches of each data-parallel rank (batch ", o_.batch,
             " / micro_batch ", o_.micro_batch, " / dp ", dp_size_, " = ", mine, ") to be a multiple of the ", P,
             " pipeline stages");
  }
  TP_CHECK(o_.seq >= 1 && o_.seq <= model.config().max_position, "[Trainer] seq ", o_.seq,
           ", expected in [1, max_position = ", model.config().max_position, "]");
  TP_CHECK(int64_t(corpus.train.size()) > o_.seq + 1, "[Trainer] training data has ",
           corpus.train.size(), " tokens, too few for seq ", o_.seq);
  check_retention(o_.retention);
  check_divergence_policy(o_.divergence);
  TP_CHECK(!o_.divergence.rollback || !o_.out_dir.empty(),
           "[Trainer] --on-divergence rollback rolls back to a checkpoint: pass --out DIR");
  if (pipeline_) {
    pipeline_->set_train_compute(o_.compute);
    pipeline_->sync_tied_weights();
  } else {
    model_.set_train_compute(o_.compute);
  }
  TP_CHECK(o_.dp_bucket_bytes >= 0, "[Trainer] dp bucket size ", o_.dp_bucket_bytes, " bytes, expected >= 0");
  const bool overlap = o_.dp_bucket_bytes > 0 && dp_size_ > 1;
  if (o_.distributed_optimizer && dp_size_ > 1) {
    TP_CHECK(!ep_, "[Trainer] the distributed optimizer (--zero 1) does not cover expert parallelism (--ep)");
    // A tied embedding's pipeline copies are summed between the stages before the reduce-scatter
    // (the two stages lay out different spaces): their buckets wait for the end of backward.
    std::vector<std::string> held;
    if (pipeline_)
      for (const ParamShard& p : pipeline_->tied_copy()) held.push_back(p.name);
    const int64_t bucket = overlap ? std::max<int64_t>(1, o_.dp_bucket_bytes / int64_t(sizeof(float)) / dp_size_)
                                   : DistributedAdamW::kBucket;
    dist_ = std::make_unique<DistributedAdamW>(parameters(), *dp_, bucket, held);
    if (overlap) buckets_ = std::make_unique<GradientBuckets>(parameters(), *dist_, *dp_);
  } else if (overlap) {
    buckets_ = std::make_unique<GradientBuckets>(parameters(), *dp_, edp_, o_.dp_bucket_bytes);
  }
  if (buckets_) set_backward_hook([b = buckets_.get()](int64_t part) { b->gradients_done(part); });
}

Trainer::~Trainer() {
  if (buckets_) set_backward_hook({});
}

void Trainer::set_backward_hook(const std::function<void(int64_t)>& hook) {
  if (pipeline_)
    pipeline_->set_backward_hook(hook);
  else
    model_.set_backward_hook(hook);
}

std::vector<ParamShard> Trainer::model_parameters() {
  return pipeline_ ? pipeline_->model_parameters() : model_.parameters();
}

std::vector<ParamShard> Trainer::parameters() { return pipeline_ ? pipeline_->parameters() : model_.parameters(); }

nlohmann::json Trainer::load_state(const std::string& path) {
  nlohmann::json state = load_checkpoint(path, parameters(), &opt_);
  if (dist_) dist_->import_state(parameters(), opt_);  // this rank's chunk of the moments
  if (state.contains("config") || state.contains("config_interleaved_rope")) {
    // Same tensor names and shapes, but GGUF llama q/k rows only fit interleaved RoPE.
    const ModelConfig saved = stored_model_config(state, path);
    TP_CHECK(saved.rope.layout == model_.config().rope.layout, "[Trainer::resume] checkpoint ", path,
             " was trained with ", saved.rope.layout == RopeLayout::kInterleaved ? "interleaved" : "half-split",
             " RoPE (q/k rows in that order) but the model uses the other layout: resume a GGUF-started run "
             "with its GGUF --model (or none), an HF-started one with its HF directory");
  }
  step_ = state.value("step", int64_t(0));
  if (state.contains("divergence")) {
    const nlohmann::json& d = state["divergence"];
    monitor_.from_json(d.value("loss_window", nlohmann::json::array()));
    // The batches the checkpoint's run skipped, and those this run was told to (or has since).
    skipped_ = merge_skipped(skipped_, d.value("skipped_batches", std::vector<int64_t>{}));
  }
  return state;
}

std::string Trainer::resume(const std::string& path) {
  const nlohmann::json state = load_state(path);
  if (!state.contains("schedule")) return "";
  const nlohmann::json& j = state["schedule"];
  std::string note;
  auto differs = [&](const char* flag, const char* key, double mine) {
    const double theirs = j.value(key, mine);
    if (mine == theirs) return;
    char b[96];
    std::snprintf(b, sizeof(b), "%s%s %g -> %g", note.empty() ? "" : ", ", flag, theirs, mine);
    note += b;
  };
  differs("--lr", "lr", double(o_.lr));
  differs("--min-lr", "min_lr", double(o_.min_lr));
  differs("--warmup", "warmup", double(o_.warmup));
  differs("--steps", "steps", double(o_.steps));
  return note.empty() ? note : "learning-rate schedule differs from the checkpoint's run: " + note;
}

void Trainer::draw_batch(int64_t batch, int64_t i, Tensor& tokens, Tensor& targets) const {
  const int64_t n_micro = o_.batch / o_.micro_batch;
  sample_windows(tokens, targets, corpus_.train, o_.micro_batch, o_.seq, o_.seed, kTrainStream,
                 uint64_t((batch - 1) * n_micro + i));
  if (o_.poison.batch == batch && o_.poison.kind == PoisonedBatch::Kind::kSpike) {
    int64_t* t = targets.data<int64_t>();
    std::fill(t, t + targets.numel(), model_.config().vocab_size - 1);
  }
}

bool Trainer::any_rank(bool mine) {
  float f = mine ? 1.0f : 0.0f;
  for (Communicator* c : {&model_.tp(), dp_, pipeline_ ? &pipeline_->pp() : nullptr})
    if (c && c->size() > 1) c->all_reduce(&f, &f, 1, DType::kF32, ReduceOp::kMax);
  return f > 0;
}

StepLog Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> comm0;
  for (const auto& [name, timer] : timed_groups_) comm0.push_back(timer->seconds());
  const int64_t n_micro = o_.batch / o_.micro_batch;  // over the DP group
  const int64_t batch = batch_for_step(step_, skipped_);
  // The test hook's NaN: every gradient of the poisoned batch becomes NaN, as after an overflow.
  const float scale = o_.poison.batch == batch && o_.poison.kind == PoisonedBatch::Kind::kNan
                          ? std::numeric_limits<float>::quiet_NaN()
                          : 1.0f / float(n_micro);
  if (pipeline_)
    pipeline_->zero_grad();
  else
    model_.zero_grad();
  std::vector<std::vector<double>> log_load;
  double loss = 0;
  Tensor x, y;
  // This DP rank's micro-batches m = dp_rank + i * dp.
  const int64_t mine = (n_micro - dp_rank_ + dp_size_ - 1) / dp_size_;
  const double bucket_s0 = buckets_ ? buckets_->reduce_seconds() : 0.0;
  const double dp_bucket_s0 = buckets_ ? buckets_->dp_reduce_seconds() : 0.0;
  if (buckets_) buckets_->begin_step(mine);
  if (pipeline_) {
    // Through the stages in 1F1B order.
    loss = pipeline_->forward_backward(
        mine, [&](int64_t i, Tensor& tokens, Tensor& targets) { draw_batch(batch, dp_rank_ + i * dp_size_, tokens, targets); },
        scale);
  } else {
    for (int64_t m = dp_rank_; m < n_micro; m += dp_size_) {
      draw_batch(batch, m, x, y);
      loss += model_.forward_backward(x, y, scale);
      add_expert_load(log_load, model_.expert_load());
    }
  }
  std::vector<ParamShard> params = parameters();
  StepLog log;
  Communicator* pp = pipeline_ ? &pipeline_->pp() : nullptr;
  const auto reduce0 = std::chrono::steady_clock::now();
  double bucket_wait_s = 0;  // waiting for buckets in flight after backward
  auto exposed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - reduce0).count(); };
  // ZeRO-1: the tied embedding's two stage copies summed first, then each DP rank's pieces over
  // DP; without it the other order (both sums are linear).
  if (dist_ && pipeline_) pipeline_->reduce_tied_grads();
  if (buckets_) {
    buckets_->finish();
    bucket_wait_s = exposed();
  } else if (dist_) {
    dist_->reduce_gradients(params);
  } else if (dp_size_ > 1) {
    reduce_over_dp(params);
  }
  if (dp_size_ > 1) {
    reduce_loss_over_dp(loss);
    log.dp_exposed_s = exposed();
  }
  if (dist_) {
    log.grad_norm = dist_->clip(params, model_.tp(), o_.clip, pp);
  } else {
    if (pipeline_) pipeline_->reduce_tied_grads();
    log.grad_norm = clip_grad_norm(params, model_.tp(), o_.clip, pp, ep_);
  }
  if (buckets_) {
    log.dp_bucket_s = buckets_->reduce_seconds() - bucket_s0;
    log.dp_buckets = buckets_->buckets();
    log.dp_buckets_during_backward = buckets_->launched_during_backward();
  }
  log.lr = lr_at(step_, o_.lr, o_.warmup, o_.steps, o_.min_lr);
  log.step = step_ + 1;
  log.loss = float(loss / double(n_micro));
  log.expert_load = std::move(log_load);
  log.activation_bytes = pipeline_ ? pipeline_->activation_bytes() : model_.activation_bytes();
  // Judged before the optimizer step, so a diverged step never reaches the weights.
  const std::optional<std::string> reason = monitor_.verdict(log.loss, log.grad_norm);
  if (any_rank(reason.has_value())) {
    log.incident = handle_divergence(reason.value_or("diverged on another rank"), batch);
  } else {
    if (dist_)
      dist_->step(params, opt_, log.lr);
    else
      opt_.step(params, log.lr);
    monitor_.accept(log.loss);
    ++step_;
    ++totals_.optimizer_steps;
  }
  log.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (size_t i = 0; i < timed_groups_.size(); ++i) {
    double seconds = timed_groups_[i].second->seconds() - comm0[i];
    // The dp group's timer counts the bucket threads' collectives too (their groups are split
    // from it): this rank's own time is the wait for them instead.
    if (static_cast<const Communicator*>(timed_groups_[i].second) == dp_ && buckets_)
      seconds = std::max(0.0, seconds - (buckets_->dp_reduce_seconds() - dp_bucket_s0)) + bucket_wait_s;
    log.comm_s.emplace_back(timed_groups_[i].first, seconds);
  }
  log.tokens_per_s = double(o_.batch * o_.seq) / (log.ms / 1000.0);
  return log;
}

Incident Trainer::handle_divergence(const std::string& reason, int64_t batch) {
  ++totals_.incidents;
  Incident inc;
  inc.batch = batch;
  inc.reason = reason;
  inc.running_mean = monitor_.running_mean();
  const std::string where = "[train] step " + std::to_string(step_ + 1) + " (batch " + std::to_string(batch) +
                            ") diverged: " + reason + "; the optimizer did not take it";
  TP_CHECK(o_.divergence.rollback, where,
           ". Stopping. Resume from the last checkpoint with --skip-batches ", batch,
           " to leave this batch out, or let the run do that itself with --on-divergence rollback");
  TP_CHECK(totals_.rollbacks < o_.divergence.max_rollbacks, where, ". Stopping: this run already rolled back ",
           totals_.rollbacks, " times (--max-rollbacks ", o_.divergence.max_rollbacks,
           "); lower the learning rate or look at the data");
  // Every checkpoint was saved after an accepted step: the latest is the last good state.
  const std::string dir = resolve_checkpoint_dir(o_.out_dir);
  skipped_ = merge_skipped(skipped_, {batch});
  load_state(dir);
  if (pipeline_) pipeline_->sync_tied_weights();
  ++totals_.rollbacks;
  inc.rolled_back_to = dir;
  inc.skipped_batches = skipped_;
  return inc;
}

void Trainer::reduce_over_dp(std::vector<ParamShard>& params) {
  // An expert's gradient already holds every EP rank's tokens (all_to_all brought them to it):
  // the other copies of that expert are in the expert-data-parallel group.
  for (ParamShard& p : params) {
    Communicator& group = p.expert ? *edp_ : *dp_;
    if (p.grad && p.grad->numel() > 0 && group.size() > 1)
      group.all_reduce(p.grad->raw(), p.grad->raw(), p.grad->numel(), DType::kF32, ReduceOp::kSum);
  }
}

void Trainer::reduce_loss_over_dp(double& loss) {
  float l = float(loss);
  dp_->all_reduce(&l, &l, 1, DType::kF32, ReduceOp::kSum);
  loss = l;
}

float Trainer::evaluate() {
  if (corpus_.val.size() <= size_t(o_.seq + 1)) return NAN;
  double sum = 0;
  Tensor x, y;
  if (pipeline_) {
    const int64_t mine = (o_.eval_batches - dp_rank_ + dp_size_ - 1) / dp_size_;
    sum = pipeline_->forward_loss(mine, [&](int64_t i, Tensor& tokens, Tensor& targets) {
      sample_windows(tokens, targets, corpus_.val, o_.micro_batch, o_.seq, o_.seed, kValStream,
                     uint64_t(dp_rank_ + i * dp_size_));
    });
  } else {
    // With experts spread over the DP ranks every rank must run as many forwards as its EP peers
    // (their tokens meet in all_to_all): the rounds past eval_batches rerun a batch, not counted.
    const int64_t rounds = (o_.eval_batches + dp_size_ - 1) / dp_size_;
    for (int64_t k = 0; k < rounds; ++k) {
      const int64_t i = dp_rank_ + k * dp_size_;
      if (i >= o_.eval_batches && !ep_) break;
      sample_windows(x, y, corpus_.val, o_.micro_batch, o_.seq, o_.seed, kValStream, uint64_t(i % o_.eval_batches));
      const float l = model_.forward_loss(x, y);
      if (i < o_.eval_batches) sum += l;
    }
  }
  if (dp_size_ > 1) {
    float f = float(sum);
    dp_->all_reduce(&f, &f, 1, DType::kF32, ReduceOp::kSum);
    sum = f;
  }
  return float(sum / double(std::max<int64_t>(1, o_.eval_batches)));
}

std::vector<std::string> Trainer::save(const SaveFault& fault) {
  TP_CHECK(!o_.out_dir.empty(), "[Trainer::save] no output directory (--out)");
  // The distributed optimizer's moments, whole for the save (every DP rank takes part) and
  // dropped again when the save is done.
  if (dist_) dist_->export_state(parameters(), opt_);
  struct DropWholeState {
    AdamW& opt;
    bool on;
    ~DropWholeState() {
      if (on) opt.clear_state();
    }
  } drop{opt_, dist_ != nullptr};
  // Every DP replica holds the same parameters and moments, except that with expert parallelism
  // the first EP group's ranks hold different experts: they all write.
  if (dp_rank_ >= (ep_ ? ep_->size() : 1)) return {};
  nlohmann::json state = o_.extra_state.is_null() ? nlohmann::json::object() : o_.extra_state;
  store_model_config(state, model_.config());  // a GGUF llama model's too (see hf_export.h)
  state["seed"] = o_.seed;
  state["schedule"] = {{"lr", o_.lr}, {"min_lr", o_.min_lr}, {"warmup", o_.warmup}, {"steps", o_.steps}};
  state["divergence"] = {{"loss_window", monitor_.to_json()}, {"skipped_batches", skipped_}};
  // A tied head's copy on the last stage is not saved: the first stage's embedding is the tensor.
  save_checkpoint(o_.out_dir, step_, model_parameters(), opt_, model_.tp(), state, fault,
                  pipeline_ ? &pipeline_->pp() : nullptr, ep_);
  ++totals_.checkpoints;
  // save_checkpoint returned on every rank: the new checkpoint is whole and `latest` names it,
  // so older ones may go. One rank removes them (the one that published).
  const bool lead = model_.tp().rank() == 0 && (!pipeline_ || pipeline_->pp().rank() == 0) && dp_rank_ == 0;
  return lead ? prune_checkpoints(o_.out_dir, o_.retention) : std::vector<std::string>{};
}

void Trainer::run(const std::function<void(const StepLog&)>& on_step) {
  if (o_.divergence.rollback && latest_checkpoint_step(o_.out_dir) < 0) save();  // something to roll back to
  while (step_ < o_.steps) {
    StepLog log = train_step();
    if (log.incident) {
      if (on_step) on_step(log);
      continue;
    }
    if (o_.eval_every > 0 && (step_ % o_.eval_every == 0 || step_ == o_.steps))
      log.val_loss = evaluate();
    if (!o_.out_dir.empty() &&
        ((o_.save_every > 0 && step_ % o_.save_every == 0) || step_ == o_.steps))
      log.removed_checkpoints = save();
    if (on_step) on_step(log);
  }
}

}  // namespace tensorpar
