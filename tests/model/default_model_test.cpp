// The default real model (models/SmolLM2-135M-Instruct.Q4_1.gguf, tools/fetch_model.sh; skipped
// when absent): Q8_0 embedding and Q4_1 blocks kept quantized, interleaved RoPE on the GGUF's
// permuted Q/K rows. Top-5 logits of every prompt position against tools/gguf_reference.py
// (float64 numpy on the dequantized weights) and the 8 greedy tokens at TP 1 and 2 (uneven:
// 9 heads / 3 kv heads split 2 + 1 groups).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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

TEST(DefaultModel, SmolLM2MatchesReference) {
  const std::string path = std::string(TP_FIXTURES_DIR) + "/../../models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (run tools/fetch_model.sh)";
  if (kSanitized) GTEST_SKIP() << "too slow under sanitizers";
  std::ifstream jf(model_fixture("smollm2_reference/reference.json"));
  const auto ref = nlohmann::json::parse(jf);
  const auto ids = ref["tokens"].get<std::vector<int64_t>>();
  const auto greedy = ref["greedy"].get<std::vector<int64_t>>();
  const int64_t T = int64_t(ids.size());
  for (int tp : {1, 2}) {
    std::vector<float> full;
    std::vector<int64_t> gen;
    int64_t V = 0;
    std::mutex mu;
    run_model_ranks(tp, [&](Communicator& world) {
      auto m = load_model(path, world);
      V = m->config().vocab_size;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (full.empty()) full.assign(size_t(T * V), NAN);
      }
      world.barrier();
      auto cache = m->make_cache(T + int64_t(greedy.size()));
      Tensor logits = nan_tensor({T, m->vocab_range().size()});
      std::vector<int32_t> toks(ids.begin(), ids.end());
      m->forward(logits, toks, *cache, false);
      scatter_logits(full, logits, m->vocab_range(), V);
      std::vector<int64_t> out{sharded_argmax(logits, m->vocab_range(), world)};
      Tensor last = nan_tensor({1, m->vocab_range().size()});
      for (size_t i = 1; i < greedy.size(); ++i) {
        m->forward(last, std::vector<int32_t>{int32_t(out.back())}, *cache, true);
        out.push_back(sharded_argmax(last, m->vocab_range(), world));
      }
      if (world.rank() == 0) gen = out;
    });
    double err = 0;
    for (int64_t t = 0; t < T; ++t)
      for (const auto& e : ref["top"][size_t(t)]) {
        const int64_t id = e[0].get<int64_t>();
        err = std::max(err, std::fabs(double(full[size_t(t * V + id)]) - e[1].get<double>()));
      }
    std::printf("  SmolLM2 tp %d: max abs error of the reference top-5 logits %.3g\n", tp, err);
    EXPECT_LE(err, 5e-4) << "tp " << tp;
    EXPECT_EQ(gen, greedy) << "tp " << tp;
  }
}

}  // namespace
}  // namespace tensorpar::testing
