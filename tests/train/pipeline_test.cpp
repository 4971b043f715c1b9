// Pipeline parallelism: the 1F1B order against the textbook table (Narayanan et al. 2021, fig. 4)
// and, for many shapes, against a simulation in which every send blocks until its receive (no
// deadlock, every dependency met); the layer split; and training through pp 2, pp 3, tp 2 x pp 2
// and pp 2 x dp 2 against the whole model on one rank (losses, norms, final weights), with the
// two copies of the tied embedding equal at the end. The distributed optimizer (ZeRO-1) against
// the replicated one, and its checkpoints across it.
#include "train/pipeline.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <cmath>
#include <cstring>
#include <mutex>
#include <deque>
#include <map>
#include <random>
#include <tuple>

#include "parallel/mesh.h"
#include "train/distributed_optimizer.h"
#include "train/pipeline_schedule.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace tensorpar::testing {
namespace {

std::string compute_order(const std::vector<PipeStep>& steps) {
  std::string out;
  for (const PipeStep& s : steps)
    if (s.op == PipeOp::kForward || s.op == PipeOp::kBackward)
    {
      if (!out.empty()) out += ' ';
      out += pipe_step_name(s);
    }
  return out;
}

TEST(PipelineSchedule, MatchesTheTextbook1F1B) {
  // Figure 4 (bottom) of Narayanan et al. 2021, 4 devices and 8 micro-batches, 0-based.
  const char* const expected[4] = {
      "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
      "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
      "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
      "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7",
  };
  for (int s = 0; s < 4; ++s) EXPECT_EQ(compute_order(one_f_one_b_schedule(s, 4, 8)), expected[s]) << "stage " << s;
  EXPECT_EQ(compute_order(one_f_one_b_schedule(0, 3, 1)), "F0 B0");
}

// Runs every stage's steps with sends that block until the matching receive (the strictest
// backend); returns false on a deadlock. Checks each step's inputs are there when it runs.
bool simulate_rendezvous(int p, int64_t M, bool with_backward, std::string& why) {
  std::vector<std::vector<PipeStep>> st(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s)
    st[size_t(s)] = with_backward ? one_f_one_b_schedule(s, p, M) : forward_only_schedule(s, p, M);
  std::vector<size_t> at(size_t(p), 0);
  // have[s]: what stage s holds per micro-batch: 1 input, 2 output, 4 output grad, 8 input grad, 16 forward done.
  std::vector<std::vector<int>> have(size_t(p), std::vector<int>(size_t(M), 0));
  for (int64_t m = 0; m < M; ++m) have[0][size_t(m)] |= 1;
  auto done = [&](int s) { return at[size_t(s)] == st[size_t(s)].size(); };
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      if (done(s)) continue;
      const PipeStep h = st[size_t(s)][at[size_t(s)]];
      int& mine = have[size_t(s)][size_t(h.micro)];
      if (h.op == PipeOp::kForward) {
        if (!(mine & 1)) return why = "F" + std::to_string(h.micro) + " without input on stage " + std::to_string(s), false;
        mine |= 2 | 16, ++at[size_t(s)], progress = true;
        if (s == p - 1) mine |= 4;  // the loss
      } else if (h.op == PipeOp::kBackward) {
        if (!(mine & 16) || !(mine & 4))
          return why = "B" + std::to_string(h.micro) + " too early on stage " + std::to_string(s), false;
        mine |= 8, ++at[size_t(s)], progress = true;
      } else if (h.op == PipeOp::kSendForward || h.op == PipeOp::kSendBackward) {
        const bool fwd = h.op == PipeOp::kSendForward;
        const int peer = fwd ? s + 1 : s - 1;
        if (peer < 0 || peer >= p) return why = "send off the pipeline", false;
        if (!(mine & (fwd ? 2 : 8))) return why = "send of data not computed", false;
        if (done(peer)) continue;
        const PipeStep ph = st[size_t(peer)][at[size_t(peer)]];
        if (ph == PipeStep{fwd ? PipeOp::kRecvForward : PipeOp::kRecvBackward, h.micro}) {
          have[size_t(peer)][size_t(h.micro)] |= fwd ? 1 : 4;
          ++at[size_t(s)], ++at[size_t(peer)], progress = true;
        }
      }
    }
  }
  for (int s = 0; s < p; ++s)
    if (!done(s)) return why = "stage " + std::to_string(s) + " blocked at " + pipe_step_name(st[size_t(s)][at[size_t(s)]]), false;
  for (int s = 0; s < p; ++s)
    for (int64_t m = 0; m < M; ++m)
      if (!(have[size_t(s)][size_t(m)] & (with_backward ? 8 : 2)))
        return why = "micro-batch " + std::to_string(m) + " unfinished on stage " + std::to_string(s), false;
  return true;
}

TEST(PipelineSchedule, NeverDeadlocksWhenSendsBlockAndKeepsAtMostStagesInFlight) {
  for (int p = 1; p <= 6; ++p)
    for (int64_t M = 1; M <= 10; ++M) {
      std::string why;
      EXPECT_TRUE(simulate_rendezvous(p, M, true, why)) << "pp " << p << " micro " << M << ": " << why;
      EXPECT_TRUE(simulate_rendezvous(p, M, false, why)) << "forward-only pp " << p << " micro " << M << ": " << why;
      for (int s = 0; s < p; ++s) {
        int64_t in_flight = 0, most = 0, next_f = 0, next_b = 0;
        for (const PipeStep& st : one_f_one_b_schedule(s, p, M)) {
          if (st.op == PipeOp::kForward) {
            EXPECT_EQ(st.micro, next_f++);
            most = std::max(most, ++in_flight);
          }
          if (st.op == PipeOp::kBackward) {
            EXPECT_EQ(st.micro, next_b++);
            --in_flight;
          }
        }
        EXPECT_EQ(next_f, M);
        EXPECT_EQ(next_b, M);
        EXPECT_EQ(most, std::min<int64_t>(p - s, M)) << "pp " << p << " stage " << s << " micro " << M;
      }
    }
}

// Runs every stage's interleaved steps with sends that never wait (threads and mpi) and each
// link's activations and gradients in two FIFO queues, as the executor does; each forward takes
// 1 time unit and each backward 2 on its stage, transfers none. Fails on a deadlock, on a
// receive that would take another micro-batch's message, or on a step whose inputs are missing;
// otherwise returns the time the last stage finishes and each stage's most chunk activations
// held at once.
struct Simulated {
  double makespan = 0;
  std::vector<int64_t> most_held;
};
bool simulate_eager(int P, int V, int64_t M, bool with_backward, Simulated& out, std::string& why) {
  std::vector<std::vector<PipeStep>> st(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s)
    st[size_t(s)] = with_backward ? interleaved_schedule(s, P, V, M) : interleaved_forward_only_schedule(s, P, V, M);
  struct Msg {
    int chunk;
    int64_t micro;
    double at;
  };
  std::map<std::tuple<int, int, bool>, std::deque<Msg>> links;  // (from, to, forward kind)
  std::vector<size_t> at(size_t(P), 0);
  std::vector<double> clock(size_t(P), 0.0);
  std::vector<int64_t> held(size_t(P), 0);
  out.most_held.assign(size_t(P), 0);
  // (stage, chunk, micro) -> bits: 1 input, 2 forward done, 4 output gradient, 8 backward done.
  std::map<std::tuple<int, int, int64_t>, int> have;
  auto name = [](int s, const PipeStep& h) { return "stage " + std::to_string(s) + " " + pipe_step_name(h); };
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      if (at[size_t(s)] == st[size_t(s)].size()) continue;
      const PipeStep h = st[size_t(s)][at[size_t(s)]];
      int& mine = have[{s, h.chunk, h.micro}];
      const bool first = s == 0 && h.chunk == 0, last = s == P - 1 && h.chunk == V - 1;
      double& t = clock[size_t(s)];
      switch (h.op) {
        case PipeOp::kForward:
          if (!first && !(mine & 1)) return why = name(s, h) + " without its input", false;
          mine |= 2 | (last ? 4 : 0), t += 1;
          if (with_backward) out.most_held[size_t(s)] = std::max(out.most_held[size_t(s)], ++held[size_t(s)]);
          break;
        case PipeOp::kBackward:
          if (!(mine & 2) || !(mine & 4)) return why = name(s, h) + " too early", false;
          mine |= 8, t += 2, --held[size_t(s)];
          break;
        case PipeOp::kSendForward:
        case PipeOp::kSendBackward: {
          const bool fwd = h.op == PipeOp::kSendForward;
          const int peer = fwd ? interleaved_next_stage(s, P, h.chunk, V) : interleaved_prev_stage(s, P, h.chunk, V);
          if (peer < 0) return why = name(s, h) + " sends off the pipeline", false;
          if (!(mine & (fwd ? 2 : 8))) return why = name(s, h) + " sends what it has not computed", false;
          const int peer_chunk = fwd ? h.chunk + (s == P - 1 ? 1 : 0) : h.chunk - (s == 0 ? 1 : 0);
          links[{s, peer, fwd}].push_back({peer_chunk, h.micro, t});
          break;
        }
        case PipeOp::kRecvForward:
        case PipeOp::kRecvBackward: {
          const bool fwd = h.op == PipeOp::kRecvForward;
          const int peer = fwd ? interleaved_prev_stage(s, P, h.chunk, V) : interleaved_next_stage(s, P, h.chunk, V);
          if (peer < 0) return why = name(s, h) + " receives from off the pipeline", false;
          std::deque<Msg>& q = links[{peer, s, fwd}];
          if (q.empty()) continue;  // blocked for now
          if (q.front().chunk != h.chunk || q.front().micro != h.micro)
            return why = name(s, h) + " would receive micro-batch " + std::to_string(q.front().micro) + " of chunk " +
                         std::to_string(q.front().chunk),
                   false;
          t = std::max(t, q.front().at);
          q.pop_front();
          mine |= fwd ? 1 : 4;
          break;
        }
      }
      ++at[size_t(s)], progress = true;
    }
  }
  for (int s = 0; s < P; ++s)
    if (at[size_t(s)] != st[size_t(s)].size())
      return why = "deadlock: " + name(s, st[size_t(s)][at[size_t(s)]]) + " never completes", false;
  for (int s = 0; s < P; ++s)
    for (int v = 0; v < V; ++v)
      for (int64_t m = 0; m < M; ++m)
        if (!(have[{s, v, m}] & (with_backward ? 8 : 2)))
          return why = "stage " + std::to_string(s) + " chunk " + std::to_string(v) + " never finished micro-batch " +
                       std::to_string(m),
                 false;
  for (const auto& [link, q] : links)
    if (!q.empty()) return why = "messages left undelivered", false;
  out.makespan = *std::max_element(clock.begin(), clock.end());
  return true;
}

TEST(PipelineSchedule, InterleavedNeverDeadlocksAndShrinksTheBubble) {
  for (int P = 1; P <= 5; ++P)
    for (int V = 1; V <= 3; ++V)
      for (int64_t M = 1; M <= 11; ++M) {
        const std::string what =
            "pp " + std::to_string(P) + " x " + std::to_string(V) + " chunks, " + std::to_string(M) + " micro-batches";
        Simulated fb, f;
        std::string why;
        if (V > 1 && M % P != 0) {
          // A last group of fewer than P micro-batches can deadlock (pp 4 x 3 chunks, 5
          // micro-batches) and leaves a larger bubble than 1F1B: refused, as in Megatron-LM.
          EXPECT_THROW(interleaved_schedule(0, P, V, M), Error) << what;
          continue;
        }
        ASSERT_TRUE(simulate_eager(P, V, M, true, fb, why)) << what << ": " << why;
        ASSERT_TRUE(simulate_eager(P, V, M, false, f, why)) << what << " forward only: " << why;
        for (int s = 0; s < P; ++s) {
          // Each stage runs every (chunk, micro-batch) forward and backward exactly once.
          int64_t forwards = 0, backwards = 0;
          for (const PipeStep& h : interleaved_schedule(s, P, V, M))
            forwards += h.op == PipeOp::kForward, backwards += h.op == PipeOp::kBackward;
          EXPECT_EQ(forwards, M * V) << what;
          EXPECT_EQ(backwards, M * V) << what;
          // Activations held: the warm-up's forwards and the one in flight at most.
          EXPECT_LE(fb.most_held[size_t(s)], std::min<int64_t>(M * V, 2 * (P - s - 1) + (V - 1) * P + 1)) << what;
        }
        // Forward 1 + backward 2 per chunk and micro-batch: the ideal stage time is 3 M V; the
        // bubble the schedule leaves, against the textbook's (P - 1) / (M V) (exact when the
        // micro-batches fill whole groups of P).
        const double ideal = 3.0 * double(M * V), bubble = fb.makespan / ideal - 1;
        const double textbook = double(P - 1) / double(M * V);
        EXPECT_NEAR(bubble, textbook, 1e-9) << what;
        if (V > 1) {
          Simulated plain;
          ASSERT_TRUE(simulate_eager(P, 1, M, true, plain, why)) << why;
          if (P > 1) {
            EXPECT_LT(bubble, plain.makespan / (3.0 * double(M)) - 1) << what << ": no smaller than 1F1B's";
          }
        }
      }
  EXPECT_EQ(pipe_step_name({PipeOp::kForward, 3, 1}), "F3c1");
}

TEST(PipelineSchedule, SplitsLayers) {
  auto ranges = [](const std::vector<LayerSpan>& v) {
    std::string out;
    for (const LayerSpan& s : v) {
      out += '[';
      out += std::to_string(s.first);
      out += ',';
      out += std::to_string(s.last);
      out += ')';
      if (s.embedding) out += 'e';
      if (s.head) out += 'h';
    }
    return out;
  };
  EXPECT_EQ(ranges(split_layers(7, 2)), "[0,4)e[4,7)h");
  EXPECT_EQ(ranges(split_layers(6, 3)), "[0,2)e[2,4)[4,6)h");
  EXPECT_EQ(ranges(split_layers(4, 1)), "[0,4)eh");
  const int64_t counts[] = {1, 5};
  EXPECT_EQ(ranges(split_layers(6, 2, counts)), "[0,1)e[1,6)h");
  EXPECT_THROW(split_layers(2, 3), Error);
  const int64_t bad_sum[] = {2, 2}, zero[] = {0, 4}, three[] = {1, 1, 2};
  EXPECT_THROW(split_layers(5, 2, bad_sum), Error);
  EXPECT_THROW(split_layers(4, 2, zero), Error);
  EXPECT_THROW(split_layers(4, 2, three), Error);
}

// ---- training through the pipeline equals the whole model ----

struct RunResult {
  std::vector<float> losses, val;
  std::vector<double> norms;
  Gathered weights;        // every parameter, assembled over tp and pp (dp rank 0)
  Gathered tied_copies;    // the last stage's copy of a tied embedding
  bool whole_moments = false;  // the AdamW moments are held whole (not sharded by ZeRO-1)
  int64_t activation_bytes = 0;  // world rank 0's, after the last step
};

TokenCorpus random_corpus(int64_t vocab) {
  std::mt19937 rng(7);
  TokenCorpus c;
  for (int i = 0; i < 4000; ++i) c.train.push_back(int32_t(rng() % uint32_t(vocab)));
  for (int i = 0; i < 600; ++i) c.val.push_back(int32_t(rng() % uint32_t(vocab)));
  return c;
}

TrainOptions small_run() {
  TrainOptions o;
  o.steps = 3;
  o.batch = 8;
  o.micro_batch = 2;  // 4 micro-batches per step (2 per DP rank at dp 2)
  o.seq = 16;
  o.lr = 3e-3f;
  o.warmup = 1;
  o.clip = 0.05;  // low enough that every step clips: the global norm must be the whole model's
  o.eval_every = 3;
  o.eval_batches = 4;
  return o;
}

// Interleaved runs: model chunks per stage (virtual stages) and the batch (sequences per step).
struct Interleave {
  int chunks = 1;
  int64_t batch = 8;
};

RunResult run(const ModelConfig& c, int tp, int pp, int dp, std::vector<int64_t> counts = {},
              TrainCompute compute = {}, bool zero = false, const std::string& out_dir = "",
              const std::string& resume = "", int64_t steps = 3, int64_t dp_bucket_bytes = 0,
              Interleave interleave = {}) {
  const TokenCorpus corpus = random_corpus(c.vocab_size);
  TrainOptions o = small_run();
  o.batch = interleave.batch;
  o.dp_bucket_bytes = dp_bucket_bytes;
  o.compute = compute;
  o.distributed_optimizer = zero;
  o.out_dir = out_dir;
  o.steps = steps;
  RunResult r;
  std::mutex mu;
  run_model_ranks(tp * pp * dp, [&](Communicator& world) {
    DeviceMesh mesh(world, {.tp = tp, .dp = dp, .pp = pp});
    std::vector<std::unique_ptr<Transformer>> chunks;
    std::vector<Transformer*> held;
    for (const LayerSpan& span : interleaved_layer_spans(c.n_layers, pp, interleave.chunks, mesh.pp_rank(), counts)) {
      chunks.push_back(std::make_unique<Transformer>(c, mesh.tp(), 32, span));
      chunks.back()->init_weights(5);
      held.push_back(chunks.back().get());
    }
    Transformer& model = *chunks.front();
    Pipeline pipe(held, mesh.pp());
    // pp 1: the plain trainer, the reference path without any pipeline code.
    Trainer t(model, corpus, o, dp > 1 ? &mesh.dp() : nullptr, pp > 1 ? &pipe : nullptr);
    if (!resume.empty()) t.resume(resume);
    t.run([&](const StepLog& l) {
      if (world.rank() == 0) r.activation_bytes = l.activation_bytes;
      if (world.rank() != world.size() - 1) return;  // the last stage's view
      r.losses.push_back(l.loss);
      r.norms.push_back(l.grad_norm);
      if (l.val_loss) r.val.push_back(*l.val_loss);
    });
    if (mesh.dp_rank() != 0) return;
    if (world.rank() == 0) r.whole_moments = t.optimizer().has_state(model.parameters().front().name);
    for (const ParamShard& p : pipe.model_parameters()) gather_into(r.weights, mu, p, *p.value);
    for (const ParamShard& p : chunks.back()->tied_head_copy()) gather_into(r.tied_copies, mu, p, *p.value);
  });
  return r;
}

// Losses, norms and the validation loss within 1e-5 relative; every weight within weight_tol
// (after 3 AdamW steps of lr 3e-3: the runs differ only by the order of a few sums).
void expect_same_training(const RunResult& want, const RunResult& got, const std::string& what,
                          double weight_tol = 2e-6, bool with_val = true) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::abs(want.losses[i])) << what << " step " << i + 1;
    EXPECT_NEAR(got.norms[i], want.norms[i], 1e-5 * want.norms[i]) << what << " step " << i + 1;
    EXPECT_GT(want.norms[i], small_run().clip) << "every step clips";
  }
  if (with_val) {
    ASSERT_EQ(got.val.size(), 1u) << what;
    EXPECT_NEAR(got.val[0], want.val[0], 1e-5 * std::abs(want.val[0])) << what;
  }
  ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
  for (const auto& [name, w] : want.weights) {
    ASSERT_TRUE(got.weights.count(name)) << what << ": " << name;
    const std::vector<float>& g = got.weights.at(name);
    ASSERT_EQ(g.size(), w.size()) << what << ": " << name;
    double worst = 0;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, double(std::abs(g[i] - w[i])));
    EXPECT_LT(worst, weight_tol) << what << ": " << name;
  }
  for (const auto& [name, copy] : got.tied_copies) {
    EXPECT_EQ(copy, got.weights.at(name)) << what << ": the last stage's copy of " << name << " drifted";
  }
}

ModelConfig four_layer_llama(bool tied) {
  ModelConfig c = tiny_llama(96);
  c.n_layers = 4;
  c.tie_embeddings = tied;
  return c;
}

TEST(PipelineTraining, TiedLlamaEqualsTheWholeModel) {
  const ModelConfig c = four_layer_llama(true);
  const RunResult whole = run(c, 1, 1, 1);
  ASSERT_EQ(whole.losses.size(), 3u);
  expect_same_training(whole, run(c, 1, 2, 1), "pp 2");
  RunResult pp2 = run(c, 1, 2, 1);
  EXPECT_EQ(pp2.tied_copies.size(), 1u);
  expect_same_training(whole, run(c, 1, 3, 1, {1, 2, 1}), "pp 3 (1,2,1)");
  // tp 2 sums row-parallel partial products in another order than tp 1: tp 2 x pp 2 equals
  // tp 2 x pp 1 as tightly as pp 2 equals pp 1, and tp 1 within the tp test's tolerance.
  const RunResult tp2 = run(c, 2, 1, 1), tp2pp2 = run(c, 2, 2, 1);
  expect_same_training(tp2, tp2pp2, "tp 2 x pp 2 against tp 2");
  expect_same_training(whole, tp2pp2, "tp 2 x pp 2 against tp 1", 1e-5);
  expect_same_training(whole, run(c, 1, 2, 2), "pp 2 x dp 2");
}

TEST(PipelineTraining, UntiedAndRecomputedEqualTheWholeModel) {
  const ModelConfig c = four_layer_llama(false);
  expect_same_training(run(c, 1, 1, 1), run(c, 1, 3, 1), "untied pp 3");
  const TrainCompute recompute{.recompute_layers = 3};
  expect_same_training(run(c, 1, 1, 1, {}, recompute), run(c, 1, 2, 1, {}, recompute), "recompute pp 2");
}

// The interleaved schedule (virtual stages, train --pp-virtual): every rank holds several model
// chunks, a micro-batch passes each stage once per chunk (the last stage handing it to the first
// stage's next chunk), the two kinds of transfer on their own groups. The same training as the
// whole model on one rank: tied and untied heads, tp x pp x dp, uneven chunks, recomputation,
// sequence parallelism, ZeRO-1 with gradient buckets, and a checkpoint resumed at another shape.
TEST(PipelineTraining, InterleavedEqualsTheWholeModel) {
  const ModelConfig c = four_layer_llama(true);
  const RunResult whole = run(c, 1, 1, 1);
  const Interleave two{.chunks = 2};
  const RunResult pp2v2 = run(c, 1, 2, 1, {}, {}, false, "", "", 3, 0, two);
  expect_same_training(whole, pp2v2, "pp 2 x 2 chunks");
  EXPECT_EQ(pp2v2.tied_copies.size(), 1u);
  expect_same_training(run(c, 2, 1, 1), run(c, 2, 2, 1, {}, {}, false, "", "", 3, 0, two),
                       "tp 2 x pp 2 x 2 chunks against tp 2");
  // dp 2: 2 micro-batches per DP rank, a multiple of the 2 stages; ZeRO-1 in 1 KiB buckets
  // launched from inside the interleaved backward.
  expect_same_training(whole, run(c, 1, 2, 2, {}, {}, false, "", "", 3, 1024, two), "pp 2 x 2 chunks x dp 2, buckets");
  expect_same_training(whole, run(c, 1, 2, 2, {}, {}, true, "", "", 3, 1024, two),
                       "pp 2 x 2 chunks x dp 2, ZeRO-1 buckets");
  const TrainCompute sp_recompute{.recompute_layers = 2, .sequence_parallel = true};
  expect_same_training(run(c, 2, 1, 1, {}, sp_recompute),
                       run(c, 2, 2, 1, {}, sp_recompute, false, "", "", 3, 0, two),
                       "tp 2 sp x pp 2 x 2 chunks, recomputed, against tp 2 sp");

  // Six layers, untied: pp 3 x 2 chunks of 1 layer over 6 micro-batches (a multiple of 3),
  // and pp 2 x 2 chunks with the layers split unevenly.
  ModelConfig six = four_layer_llama(false);
  six.n_layers = 6;
  const Interleave pp3{.chunks = 2, .batch = 12};
  expect_same_training(run(six, 1, 1, 1, {}, {}, false, "", "", 3, 0, {.batch = 12}),
                       run(six, 1, 3, 1, {}, {}, false, "", "", 3, 0, pp3), "untied pp 3 x 2 chunks");
  expect_same_training(run(six, 1, 1, 1), run(six, 1, 2, 1, {2, 1, 1, 2}, {}, false, "", "", 3, 0, two),
                       "untied pp 2 x 2 chunks (2,1,1,2 layers)");

  // Saved by pp 2 x 2 chunks after 2 steps, resumed for the third at pp 1 and at pp 2 x 1.
  const std::string root = ::testing::TempDir() + "tensorpar_interleaved_ckpt";
  std::filesystem::remove_all(root);
  run(c, 1, 2, 1, {}, {}, false, root, "", 2, 0, two);
  RunResult last = whole;
  last.losses.erase(last.losses.begin(), last.losses.begin() + 2);
  last.norms.erase(last.norms.begin(), last.norms.begin() + 2);
  expect_same_training(last, run(c, 1, 1, 1, {}, {}, false, "", root, 3), "pp 2 x 2 chunks -> pp 1", 2e-6, false);
  expect_same_training(last, run(c, 1, 2, 1, {}, {}, false, "", root, 3), "pp 2 x 2 chunks -> pp 2", 2e-6, false);
  std::filesystem::remove_all(root);
}

// Sequence parallelism (TrainCompute::sequence_parallel): the same training as tensor
// parallelism alone at tp 2, uneven row shares at tp 3 (32 rows: 11, 11, 10), through pipeline
// stages (each TP rank hands its rows to the next stage's), with recomputation, ZeRO-1 and dp.
TEST(SequenceParallel, EqualsTensorParallelTraining) {
  const ModelConfig c = four_layer_llama(true);
  const TrainCompute sp{.sequence_parallel = true};
  const RunResult whole = run(c, 1, 1, 1), tp2 = run(c, 2, 1, 1), tp2_sp = run(c, 2, 1, 1, {}, sp);
  expect_same_training(tp2, tp2_sp, "tp 2 sp");
  // The residual stream and the norms' outputs are kept for this rank's rows only.
  EXPECT_LT(tp2_sp.activation_bytes, tp2.activation_bytes);
  EXPECT_LT(tp2.activation_bytes, whole.activation_bytes);
  expect_same_training(whole, run(c, 3, 1, 1, {}, sp), "tp 3 sp (uneven rows)", 1e-5);
  expect_same_training(tp2, run(c, 2, 2, 1, {}, sp), "tp 2 x pp 2 sp");
  const TrainCompute sp_recompute{.recompute_layers = 3, .sequence_parallel = true};
  expect_same_training(tp2, run(c, 2, 2, 1, {}, sp_recompute), "tp 2 x pp 2 sp recompute");
  expect_same_training(tp2, run(c, 2, 2, 2, {}, sp, true), "tp 2 x pp 2 x dp 2 sp zero");
  const ModelConfig untied = four_layer_llama(false);
  expect_same_training(run(untied, 3, 1, 1), run(untied, 3, 3, 1, {}, sp), "untied tp 3 x pp 3 sp");
}

// ZeRO-1 (distributed_optimizer.h): the moments sharded over DP, gradients reduce-scattered and
// parameters all-gathered give the replicated optimizer's training (losses, clipped norms,
// validation, every weight) at dp 2 and 4, with tp and with a tied pipeline.
TEST(DistributedOptimizer, EqualsTheReplicatedOptimizer) {
  const ModelConfig c = four_layer_llama(true);
  const RunResult whole = run(c, 1, 1, 1);
  EXPECT_TRUE(whole.whole_moments);
  const RunResult dp2 = run(c, 1, 1, 2, {}, {}, true);
  EXPECT_FALSE(dp2.whole_moments) << "the moments are sharded, not replicated";
  expect_same_training(whole, dp2, "dp 2 zero");
  expect_same_training(whole, run(c, 1, 1, 4, {}, {}, true), "dp 4 zero");
  expect_same_training(run(c, 2, 1, 2), run(c, 2, 1, 2, {}, {}, true), "tp 2 x dp 2 zero");
  expect_same_training(whole, run(c, 1, 2, 2, {}, {}, true), "pp 2 x dp 2 zero (tied)");
}

// Gradient buckets reduced while backward goes on (gradient_buckets.h) train exactly as the
// reduction after backward at dp 2 (each element is one addition either way), and within the
// usual tolerance through tp, pipeline stages (tied: the last stage's copy too), sequence
// parallelism and recomputation, and at dp 4; likewise ZeRO-1's reduce-scatter in buckets.
TEST(DpBuckets, TrainAsTheReductionAfterBackward) {
  const ModelConfig c = four_layer_llama(true);
  const RunResult dp2 = run(c, 1, 1, 2);
  for (int64_t bytes : {int64_t(1), int64_t(8) << 10, int64_t(1) << 30}) {
    const RunResult bucketed = run(c, 1, 1, 2, {}, {}, false, "", "", 3, bytes);
    EXPECT_EQ(bucketed.losses, dp2.losses) << bytes << " bytes";
    EXPECT_EQ(bucketed.norms, dp2.norms) << bytes << " bytes";
    EXPECT_EQ(bucketed.weights, dp2.weights) << bytes << " bytes";
  }
  const RunResult whole = run(c, 1, 1, 1);
  expect_same_training(whole, run(c, 1, 2, 2, {}, {}, false, "", "", 3, 8 << 10), "pp 2 x dp 2 buckets (tied)");
  expect_same_training(whole, run(c, 1, 1, 4, {}, {}, false, "", "", 3, 8 << 10), "dp 4 buckets");
  const TrainCompute sp_recompute{.recompute_layers = 2, .sequence_parallel = true};
  expect_same_training(run(c, 2, 1, 1), run(c, 2, 2, 2, {}, sp_recompute, false, "", "", 3, 8 << 10),
                       "tp 2 x pp 2 x dp 2 sp recompute buckets");
  // ZeRO-1's buckets, reduce-scattered while backward goes on: at dp 2 the same as its reduction
  // after backward bit for bit; with a tied embedding over two stages (its copies' buckets wait
  // for the stages' sum), at dp 4 (pieces of 2 KiB: the last bucket padded) and in 3D with SP.
  const RunResult zero = run(c, 1, 1, 2, {}, {}, true);
  for (int64_t bytes : {int64_t(64), int64_t(8) << 10}) {
    const RunResult bucketed = run(c, 1, 1, 2, {}, {}, true, "", "", 3, bytes);
    EXPECT_EQ(bucketed.losses, zero.losses) << "zero, " << bytes << " bytes";
    EXPECT_EQ(bucketed.weights, zero.weights) << "zero, " << bytes << " bytes";
  }
  expect_same_training(whole, run(c, 1, 2, 2, {}, {}, true, "", "", 3, 8 << 10), "pp 2 x dp 2 zero buckets (tied)");
  expect_same_training(whole, run(c, 1, 1, 4, {}, {}, true, "", "", 3, 8 << 10), "dp 4 zero buckets");
  const TrainCompute sp{.sequence_parallel = true};
  expect_same_training(run(c, 2, 1, 1), run(c, 2, 2, 2, {}, sp, true, "", "", 3, 8 << 10),
                       "tp 2 x pp 2 x dp 2 sp zero buckets");
}

// Checkpoints of a ZeRO run hold whole moments: a run saved under it resumes without it at
// another shape, and a replicated run's checkpoint resumes under it, each continuing as the
// uninterrupted run does.
TEST(DistributedOptimizer, CheckpointsResumeAcrossIt) {
  const ModelConfig c = four_layer_llama(true);
  const std::string root = ::testing::TempDir() + "tensorpar_zero_ckpt";
  std::filesystem::remove_all(root);
  const RunResult whole = run(c, 1, 1, 1, {}, {}, false, "", "", 4);
  ASSERT_EQ(whole.losses.size(), 4u);
  auto tail = [](const RunResult& r) {
    RunResult t = r;
    t.losses.erase(t.losses.begin(), t.losses.begin() + 2);
    t.norms.erase(t.norms.begin(), t.norms.begin() + 2);
    return t;
  };
  run(c, 1, 1, 2, {}, {}, true, root + "/zero", "", 2);  // saves step 2
  expect_same_training(tail(whole), run(c, 2, 1, 1, {}, {}, false, "", root + "/zero", 4),
                       "zero dp 2 -> replicated tp 2", 1e-5, false);
  run(c, 1, 1, 1, {}, {}, false, root + "/plain", "", 2);
  expect_same_training(tail(whole), run(c, 1, 1, 2, {}, {}, true, "", root + "/plain", 4),
                       "replicated -> zero dp 2", 2e-6, false);
  std::filesystem::remove_all(root);
}

// The layout itself on a hand-made parameter list whose size no DP size divides: chunks cross
// parameter boundaries and the last is padded, collectives run in one bucket or in several (the
// last partial); a step equals AdamW's on the summed gradients.
TEST(DistributedOptimizer, ChunksCrossParametersAndPad) {
  for (auto [dp, bucket] : std::vector<std::pair<int, int64_t>>{{2, DistributedAdamW::kBucket}, {3, 2}, {2, 3}}) {
    SCOPED_TRACE("dp " + std::to_string(dp) + " bucket " + std::to_string(bucket));
    run_model_ranks(dp, [&](Communicator& dpg) {
      std::vector<Tensor> values, grads;
      const std::vector<int64_t> sizes = {5, 1, 7};  // 13 elements
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::vector<float> v(static_cast<size_t>(sizes[i])), g(v.size());
        for (size_t k = 0; k < v.size(); ++k)
          v[k] = 0.1f * float(i + k), g[k] = 0.01f * float(k + 1) * float(dpg.rank() + 1) - 0.02f;
        values.push_back(Tensor::from_f32({sizes[i]}, v, DType::kF32));
        grads.push_back(Tensor::from_f32({sizes[i]}, g, DType::kF32));
      }
      auto shards = [&](std::vector<Tensor>& val, std::vector<Tensor>& grd) {
        std::vector<ParamShard> ps;
        for (size_t i = 0; i < val.size(); ++i) {
          ParamShard p;
          p.name = std::string(1, char('a' + i));
          p.value = &val[i], p.grad = &grd[i], p.global_shape = val[i].shape();
          ps.push_back(p);
        }
        return ps;
      };
      // The reference: gradients summed over DP, then the replicated AdamW on every rank.
      std::vector<Tensor> ref_v, ref_g;
      for (size_t i = 0; i < values.size(); ++i) {
        ref_v.push_back(values[i].clone());
        ref_g.push_back(grads[i].clone());
        dpg.all_reduce(ref_g[i].raw(), ref_g[i].raw(), ref_g[i].numel(), DType::kF32, ReduceOp::kSum);
      }
      AdamW ref_opt(AdamWConfig{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f}), opt(ref_opt.config());
      std::vector<ParamShard> ref = shards(ref_v, ref_g), mine = shards(values, grads);
      DistributedAdamW dist(mine, dpg, bucket);  // small buckets: several per chunk, the last partial
      EXPECT_EQ(dist.total(), 13);
      EXPECT_EQ(dist.chunk(), (13 + dp - 1) / dp);
      std::vector<Tensor> local;  // each step's local gradients (the reduction overwrites the chunk)
      for (const Tensor& g : grads) local.push_back(g.clone());
      for (int step = 0; step < 2; ++step) {
        ref_opt.step(ref, 1e-2f);
        for (size_t i = 0; i < grads.size(); ++i) std::memcpy(grads[i].raw(), local[i].raw(), size_t(grads[i].nbytes()));
        dist.reduce_gradients(mine);
        dist.step(mine, opt, 1e-2f);
      }
      for (size_t i = 0; i < values.size(); ++i)
        EXPECT_LE(max_abs_diff(values[i].to_vector(), ref_v[i].to_vector()), 1e-6) << "p" << i << " dp " << dp;
      // The moments gathered whole equal the replicated optimizer's.
      dist.export_state(mine, opt);
      for (size_t i = 0; i < values.size(); ++i)
        EXPECT_LE(max_abs_diff(opt.state(mine[i]).exp_avg.to_vector(), ref_opt.state(ref[i]).exp_avg.to_vector()),
                  1e-7);
    });
  }
}

}  // namespace
}  // namespace tensorpar::testing
