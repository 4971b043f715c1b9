// Pipeline stages at inference (StagedModel, load_pipeline_stage): each rank holds its stage's
// layers and KV cache, the hidden rows pass stage to stage, the last stage's logits are
// broadcast. The logits of a batch of sequences (a prompt, its chunks, decode rows) equal the
// whole model's at the same tp bitwise — the stages run the same layer forward in the same
// order — on Llama (GQA), GPT-2, Gemma 3 (sliding window, post norms) and a mixture-of-experts
// model, even and uneven splits; memory per rank holds only the stage's layers.
#include <gtest/gtest.h>

#include <mutex>

#include "model/model_test_util.h"
#include "infer/perplexity.h"
#include "model/staged_model.h"
#include "parallel/mesh.h"

namespace tensorpar::testing {
namespace {

struct Logits {
  std::vector<float> prompt, decode;  // every prompt row, then one decode row (all vocab shards)
  int64_t weight_bytes = 0, kv_bytes_per_token = 0;  // TP rank 0 of the first stage
};

// Two sequences together (one a prompt in two chunks), then a decode row each.
Logits run_logits(CausalLM& m, Communicator& tp) {
  const int64_t Vl = m.vocab_range().size(), V = m.config().vocab_size;
  const std::vector<int32_t> a{3, 17, 42, 9, 120, 7, 55, 1, 88}, b{200, 4, 66, 31};
  auto pool = m.make_kv_pool(8, 4);
  const std::vector<int32_t> ta{0, 1, 2}, tb{5, 3};
  SeqChunk c1, c2;
  c1.tokens = std::span(a).subspan(0, 5), c1.pos0 = 0, c1.blocks = ta, c1.logits = LogitRows::kAll;
  c2.tokens = b, c2.pos0 = 0, c2.blocks = tb, c2.logits = LogitRows::kAll;
  const SeqChunk first[2] = {c1, c2};
  Tensor lg = Tensor::empty({9, Vl}, DType::kF32);
  m.forward_batch(lg, first, *pool);
  Logits out;
  out.prompt = gather_vocab_shards(lg, m.vocab_range(), V, tp).to_vector();
  SeqChunk c3 = c1, d;
  c3.tokens = std::span(a).subspan(5), c3.pos0 = 5, c3.logits = LogitRows::kLast;
  const int32_t next[1] = {11};
  d.tokens = next, d.pos0 = 4, d.blocks = tb, d.logits = LogitRows::kLast;
  const SeqChunk second[2] = {c3, d};
  Tensor lg2 = Tensor::empty({2, Vl}, DType::kF32);
  m.forward_batch(lg2, second, *pool);
  out.decode = gather_vocab_shards(lg2, m.vocab_range(), V, tp).to_vector();
  out.weight_bytes = m.weight_bytes();
  out.kv_bytes_per_token = m.kv_bytes_per_token();
  return out;
}

class StagedModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StagedModelTest, LogitsEqualTheWholeModelBitwise) {
  const std::string path = model_fixture(GetParam());
  const int64_t layers = read_model_config(path).n_layers;
  for (int tp : {1, 2}) {
    Logits whole;
    run_model_ranks(tp, [&](Communicator& world) {
      auto m = load_model(path, world);
      const Logits l = run_logits(*m, world);
      if (world.rank() == 0) whole = l;
    });
    std::vector<std::vector<int64_t>> splits{{}};  // even
    if (layers >= 3) splits.push_back({1, layers - 1});
    for (int pp = 2; pp <= std::min<int64_t>(3, layers); ++pp)
      for (const std::vector<int64_t>& counts : splits) {
        if (!counts.empty() && int64_t(counts.size()) != pp) continue;
        SCOPED_TRACE(GetParam() + " tp " + std::to_string(tp) + " pp " + std::to_string(pp) +
                     (counts.empty() ? " even" : " uneven"));
        // Whole forwards (micro-batches of 64 rows: these are 9 and 2) and cut into micro-batches
        // of at least 1 row (pp of them, chunks split across them).
        for (int64_t micro_rows : {int64_t(64), int64_t(1)}) {
          std::vector<Logits> got(size_t(tp * pp));
          run_model_ranks(tp * pp, [&](Communicator& world) {
            DeviceMesh mesh(world, {.tp = tp, .pp = pp});
            auto m = load_pipeline_stage(path, mesh.tp(), mesh.pp(), world, {}, counts, micro_rows);
            got[size_t(world.rank())] = run_logits(*m, mesh.tp());
          });
          for (size_t r = 0; r < got.size(); ++r) {
            EXPECT_EQ(got[r].prompt, whole.prompt) << "world rank " << r << ", micro-batch rows " << micro_rows;
            EXPECT_EQ(got[r].decode, whole.decode) << "world rank " << r << ", micro-batch rows " << micro_rows;
          }
          if (micro_rows == 1) continue;
          EXPECT_LT(got[0].weight_bytes, whole.weight_bytes);
          EXPECT_LT(got[0].kv_bytes_per_token, whole.kv_bytes_per_token);
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, StagedModelTest,
                         ::testing::Values("llama_gqa", "gpt2", "gemma3_tiny", "gemma3_pattern", "qwen2_moe_tiny"));

// Micro-batches of about N / n rows in chunk order; a chunk cut at a token keeps its logits
// request on its last part only, so the logits rows keep their order and count.
TEST(StagedModelTest, SplitsRowsIntoMicroBatches) {
  const std::vector<int32_t> a(7, 1), b(2, 2), blocks{0, 1, 2};
  SeqChunk ca, cb;
  ca.tokens = a, ca.pos0 = 3, ca.blocks = blocks, ca.logits = LogitRows::kLast;
  cb.tokens = b, cb.pos0 = 0, cb.blocks = blocks, cb.logits = LogitRows::kAll;
  const SeqChunk seqs[2] = {ca, cb};
  auto describe = [](const std::vector<std::vector<SeqChunk>>& mbs) {
    std::string s;
    for (const auto& mb : mbs) {
      s += "[";
      for (const SeqChunk& c : mb)
        s += std::to_string(c.pos0) + "+" + std::to_string(c.tokens.size()) +
             (c.logits == LogitRows::kAll ? "a" : c.logits == LogitRows::kLast ? "l" : "n") + " ";
      s += "]";
    }
    return s;
  };
  EXPECT_EQ(describe(split_micro_batches(seqs, 1)), "[3+7l 0+2a ]");
  EXPECT_EQ(describe(split_micro_batches(seqs, 2)), "[3+5n ][8+2l 0+2a ]");
  EXPECT_EQ(describe(split_micro_batches(seqs, 3)), "[3+3n ][6+3n ][9+1l 0+2a ]");
  EXPECT_EQ(describe(split_micro_batches(seqs, 100)).size(), describe(split_micro_batches(seqs, 9)).size());
  EXPECT_EQ(split_micro_batches(seqs, 9).size(), 9u);  // at most one micro-batch per row
}

TEST(StagedModelTest, RefusesTraining) {
  const std::string path = model_fixture("llama_gqa");
  run_model_ranks(2, [&](Communicator& world) {
    DeviceMesh mesh(world, {.pp = 2});
    auto m = load_pipeline_stage(path, mesh.tp(), mesh.pp(), world);
    const Tensor t = Tensor::zeros({1, 4}, DType::kI64);
    EXPECT_THROW(m->forward_backward(t, t, 1.0f), Error);
  });
}

}  // namespace
}  // namespace tensorpar::testing
