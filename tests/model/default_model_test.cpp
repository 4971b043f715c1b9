// The default real model (models/SmolLM2-135M-Instruct.Q4_1.gguf, tools/fetch_model.sh; skipped
// when absent): Q8_0 embedding and Q4_1 blocks kept quantized, interleaved RoPE on the GGUF's
// permuted Q/K rows. Top-5 logits of every prompt position against tools/gguf_reference.py
// (float64 numpy on the dequantized weights) and the 8 greedy tokens at TP 1 and 2 (uneven:
// 9 heads / 3 kv heads split 2 + 1 groups).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fixtures_dir.h"
#include "kernels/cpu/int8_matmul.h"
#include "model/model_test_util.h"

namespace tensorpar::testing {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

struct ModelRun {
  std::vector<float> logits;  // (T, V) of the prompt
  std::vector<int64_t> greedy;
  int64_t vocab = 0;
};

ModelRun run_default_model(const std::string& path, int tp, bool int8, const std::vector<int64_t>& ids,
                           size_t n_greedy) {
  ModelRun run;
  const int64_t T = int64_t(ids.size());
  std::mutex mu;
  run_model_ranks(tp, [&](Communicator& world) {
    auto m = load_model(path, world);
    m->set_int8_activations(int8);
    {
      std::lock_guard<std::mutex> lock(mu);
      run.vocab = m->config().vocab_size;
      if (run.logits.empty()) run.logits.assign(size_t(T * run.vocab), NAN);
    }
    world.barrier();
    auto cache = m->make_cache(T + int64_t(n_greedy));
    Tensor logits = nan_tensor({T, m->vocab_range().size()});
    std::vector<int32_t> toks(ids.begin(), ids.end());
    m->forward(logits, toks, *cache, false);
    scatter_logits(run.logits, logits, m->vocab_range(), run.vocab);
    std::vector<int64_t> out{sharded_argmax(logits, m->vocab_range(), world)};
    Tensor last = nan_tensor({1, m->vocab_range().size()});
    for (size_t i = 1; i < n_greedy; ++i) {
      m->forward(last, std::vector<int32_t>{int32_t(out.back())}, *cache, true);
      out.push_back(sharded_argmax(last, m->vocab_range(), world));
    }
    if (world.rank() == 0) run.greedy = out;
  });
  return run;
}

// The largest |logit - reference| over the reference's top-5 ids of every prompt position.
double top5_error(const ModelRun& run, const nlohmann::json& ref) {
  double err = 0;
  for (size_t t = 0; t < ref["top"].size(); ++t)
    for (const auto& e : ref["top"][t]) {
      const int64_t id = e[0].get<int64_t>();
      err = std::max(err, std::fabs(double(run.logits[t * size_t(run.vocab) + size_t(id)]) - e[1].get<double>()));
    }
  return err;
}

// f32 activations (set_int8_activations(false)) against the float64 reference on the dequantized
// weights: the engine's arithmetic differs only by f32 rounding.
TEST(DefaultModel, SmolLM2MatchesReference) {
  const std::string path = test::fixtures_dir() + "/../../models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (run tools/fetch_model.sh)";
  if (kSanitized) GTEST_SKIP() << "too slow under sanitizers";
  std::ifstream jf(model_fixture("smollm2_reference/reference.json"));
  const auto ref = nlohmann::json::parse(jf);
  const auto ids = ref["tokens"].get<std::vector<int64_t>>();
  const auto greedy = ref["greedy"].get<std::vector<int64_t>>();
  for (int tp : {1, 2}) {
    const ModelRun run = run_default_model(path, tp, false, ids, greedy.size());
    const double err = top5_error(run, ref);
    std::printf("  SmolLM2 f32 activations tp %d: max abs error of the reference top-5 logits %.3g\n", tp, err);
    EXPECT_LE(err, 5e-4) << "tp " << tp;
    EXPECT_EQ(run.greedy, greedy) << "tp " << tp;
  }
}

// Mean negative log-likelihood of each prompt token after the first (as gguf_reference.py's "nll").
double prompt_nll(const ModelRun& run, const std::vector<int64_t>& ids) {
  double sum = 0;
  const size_t V = size_t(run.vocab);
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    const float* l = run.logits.data() + t * V;
    const double mx = *std::max_element(l, l + V);
    double z = 0;
    for (size_t v = 0; v < V; ++v) z += std::exp(double(l[v]) - mx);
    sum += mx + std::log(z) - double(l[size_t(ids[t + 1])]);
  }
  return sum / double(ids.size() - 1);
}

// The default path on CPUs with AVX2 or AVX512-VNNI: 8-bit activations against the reference that rounds the
// same matmul inputs by the same rule (tools/gguf_reference.py --activations int8). Bounds from
// measurement, not tuned to this build: with 8-bit rounding the model is chaotic at the f32
// level: an element within f32 rounding of a step boundary lands one step apart, and SmolLM2's
// large activation outliers make steps large. Perturbing every matmul input of the reference by
// 1e-7 relative (14 random draws) moved its top-5 logits by 0.67-1.19 and its prompt NLL by
// -0.014..+0.058 nats; the engine (f32 everywhere, not float64) is a somewhat larger such draw
// (measured 0.84-1.16 and +0.055..+0.072). So: top-5 logits within 2.5 and NLL within 0.15 nats;
// a misread block or scale moves logits by tens. Greedy tokens are not
// compared: the reference's own first step is a 0.33 margin, inside that noise. The kernel's
// arithmetic is checked exactly in tests/kernels/int8_matmul_test.cpp.
TEST(DefaultModel, SmolLM2Int8ActivationsMatchReference) {
  const std::string path = test::fixtures_dir() + "/../../models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (run tools/fetch_model.sh)";
  if (kSanitized) GTEST_SKIP() << "too slow under sanitizers";
  if (!int8_matmul_usable(DType::kQ4_1)) GTEST_SKIP() << "this CPU has no int8 kernel (AVX2): f32 activations only";
  std::ifstream jf(model_fixture("smollm2_reference/reference_int8.json"));
  const auto ref = nlohmann::json::parse(jf);
  const auto ids = ref["tokens"].get<std::vector<int64_t>>();
  for (int tp : {1, 2}) {
    const ModelRun run = run_default_model(path, tp, true, ids, 1);
    const double err = top5_error(run, ref), nll = prompt_nll(run, ids);
    std::printf("  SmolLM2 int8 activations tp %d: max abs error of the reference top-5 logits %.3g, "
                "prompt NLL %.4f (reference %.4f)\n", tp, err, nll, ref["nll"].get<double>());
    EXPECT_LE(err, 2.5) << "tp " << tp;
    EXPECT_NEAR(nll, ref["nll"].get<double>(), 0.15) << "tp " << tp;
  }
}

}  // namespace
}  // namespace tensorpar::testing
