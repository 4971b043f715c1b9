// GradientBuckets: data-parallel gradients reduced in buckets while backward goes on (this
// binary runs under ThreadSanitizer too: the communication thread reads the gradients backward
// wrote, while the rank's own thread goes on). Checked at tp 2 x dp 2 over two micro-batches, against the reference reduction (one all-reduce per
// tensor after backward, on a copy): the sums are bitwise the same (two ranks: one addition per
// element) for every bucket size; no bucket is launched before the last micro-batch's backward
// has finished every gradient in it (the order of the hook's reports, not time, is asserted);
// the head's bucket is launched before the layers' backward; a model that never calls the hook
// is reduced by finish() alone.
#include "train/gradient_buckets.h"

#include <gtest/gtest.h>

#include <mutex>
#include <random>

#include "comm/timed_communicator.h"
#include "model/transformer.h"
#include "parallel/mesh.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace tensorpar::testing {
namespace {

ModelConfig untied_llama() {
  ModelConfig c = tiny_llama(96);
  c.n_layers = 4;
  c.tie_embeddings = false;  // the LM head is the head part's own tensor
  return c;
}

// Micro-batch m of DP rank d: (2, 8) tokens and targets, the same on the DP rank's TP ranks.
void micro_batch(int d, int m, int64_t vocab, Tensor& tokens, Tensor& targets) {
  std::mt19937 rng(uint32_t(100 + 10 * d + m));
  tokens = Tensor::empty({2, 8}, DType::kI64);
  targets = Tensor::empty({2, 8}, DType::kI64);
  for (int64_t i = 0; i < 16; ++i) {
    tokens.data<int64_t>()[i] = int64_t(rng() % uint32_t(vocab));
    targets.data<int64_t>()[i] = int64_t(rng() % uint32_t(vocab));
  }
}

std::vector<std::vector<float>> copy_grads(const std::vector<ParamShard>& ps) {
  std::vector<std::vector<float>> out;
  for (const ParamShard& p : ps) {
    const float* g = p.grad->data<float>();
    out.emplace_back(g, g + p.grad->numel());
  }
  return out;
}

struct Report {
  int micro = 0;
  int64_t part = 0;
  int64_t launched = 0;  // buckets launched after this report
};

TEST(GradientBuckets, LaunchOnlyFinishedGradientsWhileBackwardGoesOnAndSumLikeOneAllReducePerTensor) {
  const ModelConfig c = untied_llama();
  for (int64_t bucket_bytes : {int64_t(1), int64_t(16) << 10, int64_t(1) << 30}) {
    run_model_ranks(4, [&](Communicator& world) {
      DeviceMesh mesh(world, {.tp = 2, .dp = 2});
      Transformer model(c, mesh.tp());
      model.init_weights(5);
      const std::vector<ParamShard> params = model.parameters();
      Tensor tokens, targets;
      auto backward_twice = [&](std::vector<Report>* reports, GradientBuckets* b) {
        model.zero_grad();
        for (int m = 0; m < 2; ++m) {
          if (reports)
            model.set_backward_hook([&, m](int64_t part) {
              b->gradients_done(part);
              reports->push_back({m, part, b->launched_during_backward()});
            });
          micro_batch(mesh.dp_rank(), m, c.vocab_size, tokens, targets);
          model.forward_backward(tokens, targets, 0.5f);
        }
      };
      // The reference: backward, then one all-reduce per tensor over dp.
      backward_twice(nullptr, nullptr);
      std::vector<std::vector<float>> want = copy_grads(params);
      for (std::vector<float>& g : want)
        mesh.dp().all_reduce(g.data(), g.data(), int64_t(g.size()), DType::kF32, ReduceOp::kSum);

      GradientBuckets buckets(params, mesh.dp(), nullptr, bucket_bytes);
      std::vector<Report> reports;
      buckets.begin_step(2);
      backward_twice(&reports, &buckets);
      buckets.finish();
      model.set_backward_hook({});
      EXPECT_EQ(copy_grads(params), want) << "bucket " << bucket_bytes << " bytes";

      // Order: nothing launched during the first micro-batch; the head's report of the last one
      // launches its bucket first (small buckets); every bucket launched by the last report.
      ASSERT_EQ(reports.size(), size_t(2 * (c.n_layers + 2)));
      int64_t before = 0;
      for (const Report& r : reports) {
        if (r.micro == 0) {
          EXPECT_EQ(r.launched, 0) << "part " << r.part << " of micro-batch 0";
        }
        EXPECT_GE(r.launched, before);
        before = r.launched;
      }
      const Report& head = reports[size_t(c.n_layers + 2)];
      EXPECT_EQ(head.micro, 1);
      EXPECT_EQ(head.part, kHeadGrads);
      if (bucket_bytes == 1) {
        EXPECT_GE(head.launched, 2) << "the final norm's and the LM head's buckets";
        EXPECT_GT(buckets.buckets(), int64_t(params.size()) / 2);
      }
      if (bucket_bytes == int64_t(1) << 30) {
        EXPECT_EQ(buckets.buckets(), 1);
      }
      EXPECT_EQ(reports.back().part, kEndGrads);
      EXPECT_EQ(reports.back().launched, buckets.buckets());
      EXPECT_EQ(buckets.launched_during_backward(), buckets.buckets());

      // A model that never reports: finish() launches and sums every bucket itself.
      backward_twice(nullptr, nullptr);
      buckets.begin_step(2);
      buckets.finish();
      EXPECT_EQ(buckets.launched_during_backward(), 0);
      EXPECT_EQ(copy_grads(params), want) << "without the hook, bucket " << bucket_bytes << " bytes";
    });
  }
}

TEST(GradientBuckets, BadArgumentsAreNamed) {
  run_model_ranks(2, [&](Communicator& world) {
    const ModelConfig c = untied_llama();
    // tp 1 on each rank's own copy: world is the dp group here.
    std::unique_ptr<Communicator> solo = world.split(world.rank(), 0);
    Transformer mine(c, *solo);
    mine.init_weights(5);
    EXPECT_THROW(GradientBuckets(mine.parameters(), world, nullptr, 0), Error);
    GradientBuckets b(mine.parameters(), world, nullptr, 1 << 20);
    EXPECT_THROW(b.begin_step(0), Error);
  });
}

// The step-time breakdown with buckets: the dp entry of comm_s is this rank's own time (its wait
// after backward and its own dp calls), not the communication thread's reduction (dp_bucket_s),
// so it stays within the step; every bucket was launched by backward (ZeRO-1's too).
TEST(DpBuckets, StepBreakdownCountsTheWaitNotTheThreadsReduction) {
  ModelConfig c = untied_llama();
  c.tie_embeddings = true;
  TokenCorpus corpus;
  std::mt19937 rng(7);
  for (int i = 0; i < 4000; ++i) corpus.train.push_back(int32_t(rng() % uint32_t(c.vocab_size)));
  TrainOptions o;
  o.steps = 3, o.batch = 8, o.micro_batch = 2, o.seq = 16, o.lr = 3e-3f;
  o.dp_bucket_bytes = 8 << 10;
  for (const bool zero : {false, true}) {
    o.distributed_optimizer = zero;
    run_model_ranks(2, [&](Communicator& world) {
      DeviceMesh mesh(world, {.tp = 1, .dp = 2});
      Transformer model(c, mesh.tp());
      model.init_weights(5);
      TimedCommunicator dp(mesh.dp());
      Trainer t(model, corpus, o, &dp);
      t.time_groups({{"dp", &dp}});
      t.run([&](const StepLog& l) {
        ASSERT_EQ(l.comm_s.size(), 1u);
        EXPECT_EQ(l.comm_s[0].first, "dp");
        EXPECT_GE(l.comm_s[0].second, 0.0);
        EXPECT_LE(l.comm_s[0].second, l.ms / 1000);
        EXPECT_LE(l.dp_exposed_s, l.ms / 1000);
        EXPECT_GT(l.dp_bucket_s, 0.0);
        EXPECT_GT(l.dp_buckets, 1);
        EXPECT_EQ(l.dp_buckets_during_backward, l.dp_buckets);
      });
    });
  }
}

}  // namespace
}  // namespace tensorpar::testing
