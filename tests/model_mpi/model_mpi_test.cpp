// Conformance under MPI (one rank per process): every rank loads its slice of each tiny fixture
// model; gathered logits equal transformers' logits.bin, greedy decoding equals greedy.txt, and
// three AdamW steps give PyTorch's losses. The world is the TP group.
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "comm/launch.h"
#include "infer/generate.h"
#include "infer/perplexity.h"
#include "io/gguf.h"
#include "model/load_model.h"
#include "model/model_test_util.h"
#include "test_util.h"
#include "train/optimizer.h"

namespace tensorpar {
namespace {


// Runs fn on this process's rank of the MPI world.
void on_mpi_world(const std::function<void(Communicator&)>& fn) {
  LaunchConfig lc;
  lc.backend = Backend::kMpi;
  launch_ranks(lc, fn);
}

class ModelMpi : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelMpi, LogitsAndGreedyMatchTransformers) {
  const std::string dir = testing::model_fixture(GetParam());
  const auto prompt = testing::read_numbers<int32_t>(dir + "/tokens.txt");
  const auto greedy = testing::read_numbers<int32_t>(dir + "/greedy.txt");
  const auto ref = testing::read_f32_file(dir + "/logits.bin");
  on_mpi_world([&](Communicator& world) {
    ASSERT_GE(world.size(), 2);
    auto model = load_model(dir, world);
    const int64_t V = model->config().vocab_size;
    std::vector<float> logits;
    perplexity(*model, prompt, int64_t(prompt.size()), [&](int64_t, const Tensor& l) {
      logits = gather_vocab_shards(l, model->vocab_range(), V, world).to_vector();
    });
    EXPECT_LT(testing::max_abs_diff(logits, ref), 1e-4) << "rank " << world.rank();
    std::optional<Tokenizer> tok;
    if (world.rank() == 0) {
      auto f = GgufFile::open(testing::model_fixture("llama_gqa_gguf") + "/model-f16.gguf");
      tok = Tokenizer::from_gguf_vocab(f->metadata().get_string_array("tokenizer.ggml.tokens"), {}, {}, -1, -1,
                                       "default");
    }
    auto cache = model->make_cache(64);
    GenerateOptions opt;
    opt.max_tokens = int64_t(greedy.size());
    const auto r = generate(*model, *cache, prompt, opt, tok ? &*tok : nullptr, nullptr);
    EXPECT_EQ(r.tokens, greedy) << "rank " << world.rank();
  });
}

TEST_P(ModelMpi, ThreeAdamWStepsGivePyTorchLosses) {
  const std::string dir = testing::model_fixture(GetParam());
  std::ifstream jf(dir + "/train.json");
  if (!jf.good()) GTEST_SKIP() << "no training reference for " << GetParam();
  const auto j = nlohmann::json::parse(jf);
  const int64_t B = j["batch"], T = j["seq"];
  const auto inputs = testing::read_numbers<int64_t>(dir + "/train_inputs.txt");
  const auto targets = testing::read_numbers<int64_t>(dir + "/train_targets.txt");
  ASSERT_EQ(int64_t(inputs.size()), B * T);
  on_mpi_world([&](Communicator& world) {
    auto model = load_model(dir, world);
    Tensor x = Tensor::empty({B, T}, DType::kI64), y = Tensor::empty({B, T}, DType::kI64);
    std::memcpy(x.raw(), inputs.data(), size_t(x.nbytes()));
    std::memcpy(y.raw(), targets.data(), size_t(y.nbytes()));
    const auto& a = j["adamw"];
    AdamW opt({.lr = a["lr"], .beta1 = a["beta1"], .beta2 = a["beta2"], .eps = a["eps"],
               .weight_decay = a["weight_decay"]});
    for (size_t step = 0; step < j["losses"].size(); ++step) {
      model->zero_grad();
      const float loss = model->forward_backward(x, y, 1.0f);
      EXPECT_NEAR(loss, double(j["losses"][step]), 1e-4 * double(j["losses"][step])) << "step " << step;
      // GPT-2's k bias has an analytically zero gradient that the reference zeroes (fixtures README).
      for (const ParamShard& p : model->parameters())
        if (p.grad && p.name.find("c_attn.k.bias") != std::string::npos) p.grad->fill_zero();
      opt.step(model->parameters(), float(a["lr"]));
    }
    EXPECT_NEAR(model->forward_loss(x, y), double(j["loss_after_steps"]), 1e-4 * double(j["loss_after_steps"]));
  });
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelMpi, ::testing::Values("llama_gqa", "llama_odd", "qwen2_bias", "gpt2"));

}  // namespace
}  // namespace tensorpar
