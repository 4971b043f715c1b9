// The generation loop over the fake model: greedy sequences equal a plain loop at every TP size;
// EOS, stop strings and the token budget end it; streamed pieces add up to the final text.
#include <string>
#include <vector>

#include "comm/launch.h"
#include "fixtures_dir.h"
#include "infer/generate.h"
#include "infer/perplexity.h"
#include "io/gguf.h"
#include "fake_model.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::FakeModel;

constexpr int64_t kVocab = 256;

// A 256-token byte-level vocabulary (from the GGUF fixture), with `eos` as end of sequence.
Tokenizer byte_tokenizer(int32_t eos) {
  auto f = GgufFile::open(test::fixtures_dir() + "/models/llama_gqa_gguf/model-f16.gguf");
  const auto& tokens = f->metadata().get_string_array("tokenizer.ggml.tokens");
  return Tokenizer::from_gguf_vocab(tokens, {}, {}, -1, eos, "default");
}

// The greedy continuation computed directly from FakeModel::logit.
std::vector<int32_t> greedy_reference(std::vector<int32_t> seq, int steps) {
  const size_t prompt = seq.size();
  for (int s = 0; s < steps; ++s) {
    const int64_t pos = int64_t(seq.size()) - 1;
    int32_t best = 0;
    for (int32_t v = 1; v < kVocab; ++v)
      if (FakeModel::logit(seq.back(), pos, v) > FakeModel::logit(seq.back(), pos, best)) best = v;
    seq.push_back(best);
  }
  return {seq.begin() + long(prompt), seq.end()};
}

struct GenRun {
  GenerateResult result;  // rank 0's
  std::string streamed;   // what rank 0 streamed
};

// Generates on tp_size ranks and returns rank 0's result; every other rank must end with the same
// tokens and stream nothing. Each rank's result is kept and compared after the join, so the check
// holds whichever rank finishes first.
GenRun run_generate(int tp_size, const std::vector<int32_t>& prompt, const GenerateOptions& opt, const Tokenizer& tok) {
  std::vector<GenerateResult> results(static_cast<size_t>(tp_size));
  std::vector<std::string> streamed(static_cast<size_t>(tp_size));
  launch_ranks({.backend = Backend::kThreads, .n_ranks = tp_size, .threads_per_rank = 1, .comm = CommOptions::from_env()},
               [&](Communicator& tp) {
                 FakeModel model(kVocab, tp);
                 auto cache = model.make_cache(256);
                 const auto r = size_t(tp.rank());
                 results[r] = generate(model, *cache, prompt, opt, tp.rank() == 0 ? &tok : nullptr,
                                       [&](std::string_view s) { streamed[r] += s; });
               });
  for (int r = 1; r < tp_size; ++r) {
    EXPECT_TRUE(streamed[size_t(r)].empty()) << "rank " << r;
    EXPECT_EQ(results[size_t(r)].tokens, results[0].tokens) << "rank " << r << " of " << tp_size;
  }
  return {results[0], streamed[0]};
}

TEST(Generate, GreedyMatchesAPlainLoopAtEveryTpSize) {
  const Tokenizer tok = byte_tokenizer(-1);
  const std::vector<int32_t> prompt = {72, 105, 33};
  const auto want = greedy_reference(prompt, 20);
  for (int n : {1, 2, 3}) {
    GenerateOptions opt;
    opt.max_tokens = 20;
    GenRun run = run_generate(n, prompt, opt, tok);
    EXPECT_EQ(run.result.tokens, want) << "tp " << n;
    EXPECT_EQ(run.result.stop_reason, "length");
    EXPECT_EQ(run.result.decode_steps, 19);
    EXPECT_EQ(run.result.text, tok.decode(want));
    EXPECT_EQ(run.streamed, run.result.text);
  }
}

TEST(Generate, StopsAtEos) {
  const std::vector<int32_t> prompt = {72, 105, 33};
  const auto seq = greedy_reference(prompt, 30);
  const int32_t eos = seq[5];
  size_t first = 0;
  while (seq[first] != eos) ++first;
  const Tokenizer tok = byte_tokenizer(eos);
  GenerateOptions opt;
  opt.max_tokens = 30;
  GenRun run = run_generate(2, prompt, opt, tok);
  EXPECT_EQ(run.result.stop_reason, "eos");
  EXPECT_EQ(run.result.tokens, std::vector<int32_t>(seq.begin(), seq.begin() + long(first)));
}

TEST(Generate, StopsBeforeAStopStringAndNeverStreamsPastIt) {
  const Tokenizer tok = byte_tokenizer(-1);
  const std::vector<int32_t> prompt = {10, 20, 30};
  const auto seq = greedy_reference(prompt, 40);
  const std::string text = tok.decode(seq);
  // A stop string from the middle of the text, at its first occurrence.
  size_t at = 6;
  while (at + 2 < text.size() && text.find(text.substr(at, 2)) != at) ++at;
  ASSERT_LT(at + 2, text.size());
  GenerateOptions opt;
  opt.max_tokens = 40;
  opt.stop = {"never-appears", text.substr(at, 2)};
  GenRun run = run_generate(3, prompt, opt, tok);
  EXPECT_EQ(run.result.stop_reason, "stop");
  EXPECT_EQ(run.result.text, text.substr(0, at));
  EXPECT_EQ(run.streamed, run.result.text);
}

TEST(Generate, RejectsBadPrompts) {
  const Tokenizer tok = byte_tokenizer(-1);
  launch_ranks({.backend = Backend::kThreads, .n_ranks = 1, .threads_per_rank = 1, .comm = CommOptions::from_env()},
               [&](Communicator& tp) {
                 FakeModel model(kVocab, tp);
                 auto cache = model.make_cache(4);
                 const std::vector<int32_t> bad = {1, 300};
                 EXPECT_THROW(generate(model, *cache, bad, {}, &tok, nullptr), Error);
                 const std::vector<int32_t> too_long = {1, 2, 3, 4, 5};
                 EXPECT_THROW(generate(model, *cache, too_long, {}, &tok, nullptr), Error);
               });
}

TEST(Perplexity, MatchesANaiveLogSoftmaxAndGathersShards) {
  std::vector<int32_t> tokens;
  testing::Rng rng(5);
  for (int i = 0; i < 23; ++i) tokens.push_back(int32_t(rng.integer(0, kVocab)));
  const int64_t ctx = 8;
  // Naive: windows of ctx from an empty cache; row t of a window predicts the next token.
  double nll = 0;
  int64_t scored = 0;
  for (size_t s = 0; s < tokens.size(); s += size_t(ctx)) {
    const size_t T = std::min(size_t(ctx), tokens.size() - s);
    for (size_t t = 0; t + 1 < T; ++t) {
      double mx = -1e30, z = 0;
      for (int64_t v = 0; v < kVocab; ++v) mx = std::max(mx, double(FakeModel::logit(tokens[s + t], int64_t(t), v)));
      for (int64_t v = 0; v < kVocab; ++v) z += std::exp(double(FakeModel::logit(tokens[s + t], int64_t(t), v)) - mx);
      nll += -(double(FakeModel::logit(tokens[s + t], int64_t(t), tokens[s + t + 1])) - mx - std::log(z));
      ++scored;
    }
  }
  for (int n : {1, 2, 3}) {
    launch_ranks({.backend = Backend::kThreads, .n_ranks = n, .threads_per_rank = 1, .comm = CommOptions::from_env()},
                 [&](Communicator& tp) {
                   FakeModel model(kVocab, tp);
                   int64_t checked = 0;
                   auto r = perplexity(model, tokens, ctx, [&](int64_t first, const Tensor& logits) {
                     const Tensor full = gather_vocab_shards(logits, model.vocab_range(), kVocab, tp);
                     const auto v = full.to_vector();
                     for (int64_t t = 0; t < full.dim(0); ++t)
                       for (int64_t c = 0; c < kVocab; ++c)
                         ASSERT_EQ(v[size_t(t * kVocab + c)], FakeModel::logit(tokens[size_t(first + t)], t, c));
                     checked += full.dim(0);
                   });
                   EXPECT_EQ(checked, int64_t(tokens.size()));
                   EXPECT_EQ(r.scored, scored);
                   EXPECT_NEAR(r.nll_sum, nll, 1e-4 * std::fabs(nll));
                 });
  }
}

}  // namespace
}  // namespace tensorpar
