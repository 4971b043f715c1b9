// The batched inference forward (CausalLM::forward_batch) on the fixture models at TP 1..3:
// sequences run together, at different positions, with prompts cut into chunks and decode rows
// mixed in, over a pool whose blocks are handed out in shuffled order, give bitwise the same
// logits as each sequence run alone with its whole prompt at once (batch invariance, what the
// server's determinism rests on). The alone run is the one-sequence path that the conformance
// tests hold to the transformers references. A ":bf16" fixture is loaded with its matrices in
// bf16 (on a CPU with AMX those multiply on its tiles: amx_matmul.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "model/model_test_util.h"

namespace tensorpar::testing {
namespace {

std::vector<float> bits(const Tensor& t) { return t.contiguous().to_vector(); }

struct Seq {
  std::vector<int32_t> prompt;
  int32_t next = 0;  // a fixed token decoded after the prompt
};

class BatchForward : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchForward, EqualsEachSequenceAlone) {
  const std::string param = GetParam();
  const bool bf16 = param.ends_with(":bf16"), kv16 = param.ends_with(":kv16");
  const std::string path = model_fixture(bf16 || kv16 ? param.substr(0, param.size() - 5) : param);
  LoadOptions lo;
  if (bf16) lo.float_weights = DType::kBF16;
  const auto base = read_numbers<int32_t>(model_fixture("llama_gqa/tokens.txt"));
  ASSERT_GE(base.size(), size_t(20));
  std::vector<Seq> seqs(3);
  seqs[0].prompt.assign(base.begin(), base.begin() + 19);
  seqs[1].prompt.assign(base.rbegin(), base.rbegin() + 7);
  seqs[2].prompt.assign(base.begin() + 3, base.begin() + 14);
  seqs[0].next = 5, seqs[1].next = 77, seqs[2].next = 200;
  for (Seq& s : seqs)  // within every fixture's vocabulary (llama_odd has 250)
    for (int32_t& t : s.prompt) t %= 240;
  for (int tp : {1, 2, 3}) {
    SCOPED_TRACE(GetParam() + " tp " + std::to_string(tp));
    run_model_ranks(tp, [&](Communicator& world) {
      auto m = load_model(path, world, lo);
      if (kv16) m->set_kv_dtype(DType::kF16);  // every pool below, alone and together
      const int64_t Vl = m->vocab_range().size();
      // Alone: whole prompt, then one decode row.
      std::vector<std::vector<float>> want_prompt, want_decode;
      for (const Seq& s : seqs) {
        auto cache = m->make_cache(int64_t(s.prompt.size()) + 1);
        Tensor lg = nan_tensor({1, Vl});
        m->forward(lg, s.prompt, *cache, true);
        want_prompt.push_back(bits(lg));
        const int32_t nx[1] = {s.next};
        m->forward(lg, nx, *cache, true);
        want_decode.push_back(bits(lg));
      }
      // Together over one pool of 4-token blocks in shuffled order.
      const int64_t bs = 4, n_blocks = 24;
      auto pool = m->make_kv_pool(n_blocks, bs);
      std::vector<int32_t> order(n_blocks);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937(7));  // the same on every rank
      std::vector<std::vector<int32_t>> tables(3);
      for (size_t i = 0, at = 0; i < 3; ++i)
        for (int64_t b = 0; b < (int64_t(seqs[i].prompt.size()) + 1 + bs - 1) / bs; ++b) tables[i].push_back(order[at++]);
      auto chunk = [&](size_t i, int64_t b, int64_t e, LogitRows lr) {
        SeqChunk c;
        c.tokens = std::span<const int32_t>(seqs[i].prompt).subspan(size_t(b), size_t(e - b));
        c.pos0 = b, c.blocks = tables[i], c.logits = lr;
        return c;
      };
      auto decode = [&](size_t i) {
        SeqChunk c;
        c.tokens = std::span<const int32_t>(&seqs[i].next, 1);
        c.pos0 = int64_t(seqs[i].prompt.size()), c.blocks = tables[i], c.logits = LogitRows::kLast;
        return c;
      };
      // Step 1: seq 0 rows [0, 6) (no logits), seq 1 whole prompt, seq 2 rows [0, 1).
      std::vector<SeqChunk> s1 = {chunk(0, 0, 6, LogitRows::kNone), chunk(1, 0, 7, LogitRows::kLast),
                                  chunk(2, 0, 1, LogitRows::kNone)};
      Tensor l1 = nan_tensor({1, Vl});
      m->forward_batch(l1, s1, *pool);
      EXPECT_EQ(bits(l1), want_prompt[1]);
      // Step 2: seq 1 decodes, seq 2 rest of its prompt, seq 0 rows [6, 19).
      std::vector<SeqChunk> s2 = {decode(1), chunk(2, 1, 11, LogitRows::kLast), chunk(0, 6, 19, LogitRows::kLast)};
      Tensor l2 = nan_tensor({3, Vl});
      m->forward_batch(l2, s2, *pool);
      EXPECT_EQ(bits(l2.slice(0, 0, 1)), want_decode[1]);
      EXPECT_EQ(bits(l2.slice(0, 1, 2)), want_prompt[2]);
      EXPECT_EQ(bits(l2.slice(0, 2, 3)), want_prompt[0]);
      // Step 3: seqs 2 and 0 decode.
      std::vector<SeqChunk> s3 = {decode(2), decode(0)};
      Tensor l3 = nan_tensor({2, Vl});
      m->forward_batch(l3, s3, *pool);
      EXPECT_EQ(bits(l3.slice(0, 0, 1)), want_decode[2]);
      EXPECT_EQ(bits(l3.slice(0, 1, 2)), want_decode[0]);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchForward,
                         ::testing::Values("llama_gqa", "gpt2", "qwen2_bias", "llama_odd",
                                           "llama_gqa_gguf/model-q4_1.gguf", "llama_gqa_gguf/model-f16.gguf",
                                           "llama_gqa:bf16", "gpt2:bf16", "llama_gqa:kv16",
                                           "gemma3_pattern:kv16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// An f16 KV cache holds half the bytes per token and gives the f32 cache's logits up to f16
// rounding of keys, values and queries (inputs of unit scale: well within 2e-2), at tp 1-3,
// Gemma 3's sliding windows included.
TEST(KvF16, HalfTheBytesAndCloseToF32) {
  const auto base = read_numbers<int32_t>(model_fixture("llama_gqa/tokens.txt"));
  std::vector<int32_t> prompt(base.begin(), base.begin() + 19);
  for (int32_t& t : prompt) t %= 240;
  for (const char* name : {"llama_gqa", "gemma3_pattern", "qwen2_bias"})
    for (int tp : {1, 2, 3}) {
      SCOPED_TRACE(std::string(name) + " tp " + std::to_string(tp));
      run_model_ranks(tp, [&](Communicator& world) {
        auto m = load_model(model_fixture(name), world);
        const int64_t Vl = m->vocab_range().size(), f32_bytes = m->kv_bytes_per_token();
        auto run = [&] {
          auto cache = m->make_cache(int64_t(prompt.size()));
          Tensor lg = nan_tensor({int64_t(prompt.size()), Vl});
          m->forward(lg, prompt, *cache, false);
          return bits(lg);
        };
        const std::vector<float> want = run();
        m->set_kv_dtype(DType::kF16);
        EXPECT_EQ(2 * m->kv_bytes_per_token(), f32_bytes);
        const std::vector<float> got = run();
        EXPECT_NE(got, want);  // the rounding is there
        EXPECT_LE(max_abs_diff(got, want), 2e-2);
        EXPECT_THROW(m->set_kv_dtype(DType::kBF16), Error);
      });
    }
}

TEST(BatchForwardErrors, RejectsShortBlockTablesAndBadLogits) {
  run_model_ranks(1, [&](Communicator& world) {
    auto m = load_model(model_fixture("llama_gqa"), world);
    auto pool = m->make_kv_pool(2, 4);
    const std::vector<int32_t> toks = {1, 2, 3, 4, 5};
    const std::vector<int32_t> one_block = {0}, bad_block = {0, 9};
    SeqChunk c;
    c.tokens = toks, c.blocks = one_block;
    Tensor lg = nan_tensor({1, m->vocab_range().size()});
    EXPECT_THROW(m->forward_batch(lg, std::span<const SeqChunk>(&c, 1), *pool), Error);
    c.blocks = bad_block;
    EXPECT_THROW(m->forward_batch(lg, std::span<const SeqChunk>(&c, 1), *pool), Error);
    const std::vector<int32_t> two = {0, 1};
    c.blocks = two;
    Tensor wrong = nan_tensor({2, m->vocab_range().size()});
    EXPECT_THROW(m->forward_batch(wrong, std::span<const SeqChunk>(&c, 1), *pool), Error);
  });
}

}  // namespace
}  // namespace tensorpar::testing
