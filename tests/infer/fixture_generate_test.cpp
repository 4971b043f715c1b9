// The generation loop and perplexity on the tiny reference models: greedy continuations equal the
// ones transformers produced (greedy.txt) and dumped logits equal logits.bin, at several TP sizes.
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "comm/launch.h"
#include "infer/generate.h"
#include "infer/perplexity.h"
#include "io/gguf.h"
#include "model/load_model.h"
#include "model/weight_source.h"
#include "model/model_test_util.h"
#include "test_util.h"

namespace tensorpar {
namespace {


// A 256-token byte vocabulary (the fixtures' vocabularies have 250-256 ids and no specials).
Tokenizer byte_tokenizer() {
  auto f = GgufFile::open(testing::model_fixture("llama_gqa_gguf") + "/model-f16.gguf");
  return Tokenizer::from_gguf_vocab(f->metadata().get_string_array("tokenizer.ggml.tokens"), {}, {}, -1, -1, "default");
}

class FixtureGenerate : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureGenerate, GreedyAndLogitsMatchTransformersAtEveryTpSize) {
  const std::string dir = testing::model_fixture(GetParam());
  const auto prompt = testing::read_numbers<int32_t>(dir + "/tokens.txt");
  const auto greedy = testing::read_numbers<int32_t>(dir + "/greedy.txt");
  const auto ref_logits = testing::read_f32_file(dir + "/logits.bin");
  const Tokenizer tok = byte_tokenizer();
  for (int n : {1, 2, 3}) {
    std::mutex mu;
    launch_ranks({.backend = Backend::kThreads, .n_ranks = n, .threads_per_rank = 1, .comm = CommOptions::from_env()},
                 [&](Communicator& tp) {
                   auto model = load_model(dir, tp);
                   const int64_t V = model->config().vocab_size;
                   ASSERT_EQ(int64_t(ref_logits.size()), int64_t(prompt.size()) * V);
                   auto cache = model->make_cache(64);
                   GenerateOptions opt;
                   opt.max_tokens = int64_t(greedy.size());
                   const auto r = generate(*model, *cache, prompt, opt, tp.rank() == 0 ? &tok : nullptr, nullptr);
                   std::vector<float> dumped;
                   perplexity(*model, prompt, int64_t(prompt.size()), [&](int64_t, const Tensor& logits) {
                     dumped = gather_vocab_shards(logits, model->vocab_range(), V, tp).to_vector();
                   });
                   std::lock_guard<std::mutex> lk(mu);
                   EXPECT_EQ(r.tokens, greedy) << "tp " << n << " rank " << tp.rank();
                   EXPECT_LT(testing::max_abs_diff(dumped, ref_logits), 1e-4) << "tp " << n;
                 });
  }
}

// A repetition penalty over the prompt and the generated tokens (Hugging Face's definition):
// the continuation transformers' generate() produced (greedy_repetition.json, made by
// tools/make_penalty_fixtures.py), at every TP size.
TEST_P(FixtureGenerate, RepetitionPenaltyMatchesTransformersAtEveryTpSize) {
  const std::string dir = testing::model_fixture(GetParam());
  const auto prompt = testing::read_numbers<int32_t>(dir + "/tokens.txt");
  std::ifstream f(dir + "/greedy_repetition.json");
  ASSERT_TRUE(f) << dir << "/greedy_repetition.json missing (tools/make_penalty_fixtures.py)";
  const auto ref = nlohmann::json::parse(f);
  const auto want = ref.at("new_tokens").get<std::vector<int32_t>>();
  const Tokenizer tok = byte_tokenizer();
  for (int n : {1, 2, 3}) {
    std::mutex mu;
    launch_ranks({.backend = Backend::kThreads, .n_ranks = n, .threads_per_rank = 1, .comm = CommOptions::from_env()},
                 [&](Communicator& tp) {
                   auto model = load_model(dir, tp);
                   auto cache = model->make_cache(64);
                   GenerateOptions opt;
                   opt.max_tokens = int64_t(want.size());
                   opt.stop_on_eos = false;
                   opt.sampling.repetition_penalty = ref.at("repetition_penalty").get<float>();
                   const auto r = generate(*model, *cache, prompt, opt, tp.rank() == 0 ? &tok : nullptr, nullptr);
                   std::lock_guard<std::mutex> lk(mu);
                   EXPECT_EQ(r.tokens, want) << "tp " << n << " rank " << tp.rank();
                 });
  }
}

INSTANTIATE_TEST_SUITE_P(Models, FixtureGenerate, ::testing::Values("llama_gqa", "llama_odd", "qwen2_bias", "gpt2"));

}  // namespace
}  // namespace tensorpar

namespace tensorpar {
namespace {

// bf16 weights (f32 accumulation): logits within a stated tolerance of the f32 reference, the same
// at every TP size to within rounding of the reduction order. Also with the weights in the layout
// the inference commands keep them in (set_int8_activations: on an AVX2 CPU without AVX-512, K-major
// panels, panel_matmul.h; elsewhere as loaded).
TEST(FixtureGenerateBf16, LogitsWithinBf16Tolerance) {
  const std::string dir = testing::model_fixture("llama_gqa");
  const auto prompt = testing::read_numbers<int32_t>(dir + "/tokens.txt");
  const auto ref = testing::read_f32_file(dir + "/logits.bin");
  double ref_scale = 0;
  for (float x : ref) ref_scale = std::max(ref_scale, double(std::fabs(x)));
  for (const bool inference_layout : {false, true})
  for (int n : {1, 2, 3}) {
    SCOPED_TRACE(inference_layout ? "inference layout" : "as loaded");
    launch_ranks({.backend = Backend::kThreads, .n_ranks = n, .threads_per_rank = 1, .comm = CommOptions::from_env()},
                 [&](Communicator& tp) {
                   LoadOptions lo;
                   lo.float_weights = DType::kBF16;
                   auto model = load_model(dir, tp, lo);
                   if (inference_layout) model->set_int8_activations(true);
                   const int64_t V = model->config().vocab_size;
                   std::vector<float> got;
                   perplexity(*model, prompt, int64_t(prompt.size()), [&](int64_t, const Tensor& l) {
                     got = gather_vocab_shards(l, model->vocab_range(), V, tp).to_vector();
                   });
                   // bf16 weights and activations keep 8 mantissa bits (2^-9 relative rounding
                   // each); through 2 layers of cancelling sums the worst logit moved by 2.1% of
                   // the largest logit when measured. Stated tolerance: 5%.
                   const double err = testing::max_abs_diff(got, ref);
                   EXPECT_LT(err, 0.05 * ref_scale) << "tp " << n << " max abs error " << err << " scale " << ref_scale;
                   EXPECT_GT(err, 0.0) << "bf16 weights should not reproduce f32 exactly";
                 });
  }
}

}  // namespace
}  // namespace tensorpar
