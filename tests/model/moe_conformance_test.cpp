// Mixture-of-experts and Qwen3 conformance: the tiny fixtures of tools/make_moe_fixtures.py
// (Mixtral with 5 experts, Qwen2-MoE with a shared expert and a dense layer, Qwen3-MoE with
// renormalised top-3 of 8, dense Qwen3 with q/k norms; references from transformers in float64)
// at every (tp, ep) with ep dividing tp up to 4 ranks: logits within 1e-4 max abs and greedy tokens
// equal to greedy.txt through the KV cache. Bad expert configurations fail naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "model/model_test_util.h"
#include "model/shard_plan.h"
#include "model/transformer.h"

namespace tensorpar::testing {
namespace {

struct Split {
  int tp, ep;
};

// Every (tp, ep) with ep | tp, tp <= 4, ep <= experts.
std::vector<Split> splits(int64_t experts) {
  std::vector<Split> out;
  for (int tp = 1; tp <= 4; ++tp)
    for (int ep = 1; ep <= tp; ++ep)
      if (tp % ep == 0 && (ep == 1 || ep <= experts)) out.push_back({tp, ep});
  return out;
}

void run_split(const std::string& path, Split s, const std::vector<int64_t>& ids, int n_new, std::vector<float>* logits,
               std::vector<int64_t>* greedy) {
  std::mutex mu;
  run_model_ranks(s.tp, [&](Communicator& world) {
    auto m = load_model(path, world, {}, ExpertParallel{s.ep, nullptr});
    m->set_int8_activations(false);  // the references multiply f32 activations
    const int64_t V = m->config().vocab_size, T = int64_t(ids.size());
    {
      std::lock_guard<std::mutex> lock(mu);
      if (logits->empty()) logits->assign(size_t(T * V), NAN);
    }
    world.barrier();
    auto cache = m->make_cache(T + n_new);
    Tensor all = nan_tensor({T, m->vocab_range().size()});
    std::vector<int32_t> toks(ids.begin(), ids.end());
    m->forward(all, toks, *cache, false);
    {
      std::lock_guard<std::mutex> lock(mu);
      scatter_logits(*logits, all, m->vocab_range(), V);
    }
    // Greedy: the prompt again through a fresh cache (last row only), then one token at a time.
    auto gcache = m->make_cache(T + n_new);
    Tensor last = nan_tensor({1, m->vocab_range().size()});
    std::vector<int64_t> gen;
    for (int i = 0; i < n_new; ++i) {
      m->forward(last, toks, *gcache, true);
      const int64_t next = sharded_argmax(last, m->vocab_range(), world);
      gen.push_back(next);
      toks = {int32_t(next)};
    }
    if (world.rank() == 0) *greedy = gen;
  });
}

struct MoeCase {
  std::string name;   // test name
  std::string dir;    // fixture directory (tokens, references)
  std::string model;  // what load_model reads: the directory or a GGUF file in it
  std::string logits, greedy;
};

// The HF fixtures, and their GGUF forms (tools/make_moe_gguf_fixtures.py: llama.cpp's names, the
// experts stacked in 3-D tensors; f32, and Q8_0 experts and projections kept quantized, each
// against transformers on the weights the file holds; qwen2moe from an all-sparse variant of
// qwen2_moe_tiny, as llama.cpp's qwen2moe has no dense layers).
std::vector<MoeCase> moe_cases() {
  std::vector<MoeCase> out;
  for (const char* n : {"mixtral_tiny", "qwen2_moe_tiny", "qwen3_moe_tiny", "qwen3_tiny"})
    out.push_back({n, model_fixture(n), model_fixture(n), "logits.bin", "greedy.txt"});
  for (const char* n : {"mixtral_tiny_gguf", "qwen3_moe_tiny_gguf", "qwen2_moe_tiny_gguf"})
    for (const char* q : {"f32", "q8_0"}) {
      const std::string dir = model_fixture(n);
      out.push_back({std::string(n) + "_" + q, dir, dir + "/model-" + q + ".gguf", std::string("logits-") + q + ".bin",
                     std::string("greedy-") + q + ".txt"});
    }
  return out;
}

class MoeConformance : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeConformance, LogitsAndGreedyAtEveryTpAndEp) {
  const MoeCase& mc = GetParam();
  const ModelConfig c = read_model_config(mc.model);
  const auto ids = read_id_lines(mc.dir + "/tokens.txt").at(0);
  const auto ref = read_f32_file(mc.dir + "/" + mc.logits);
  const auto greedy = read_id_lines(mc.dir + "/" + mc.greedy).at(0);
  for (const Split s : splits(c.moe.n_experts)) {
    if (c.moe.n_experts == 0 && s.ep > 1) continue;
    SCOPED_TRACE(mc.name + " tp " + std::to_string(s.tp) + " ep " + std::to_string(s.ep));
    std::vector<float> got;
    std::vector<int64_t> gen;
    run_split(mc.model, s, ids, int(greedy.size()), &got, &gen);
    ASSERT_EQ(got.size(), ref.size());
    const double err = max_abs_diff(got, ref);
    EXPECT_LE(err, 1e-4);
    std::printf("  %s tp %d ep %d: max abs logit error %.3g\n", mc.name.c_str(), s.tp, s.ep, err);
    EXPECT_EQ(gen, greedy);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MoeConformance, ::testing::ValuesIn(moe_cases()),
                         [](const auto& info) { return info.param.name; });

// The config's expert layout: Qwen2-MoE's mlp_only_layers make layer 1 dense; every rank holds
// partition_even of the experts (5 experts over 2 ranks: 3 + 2).
TEST(MoeConfig, LayersAndExpertPlacement) {
  const ModelConfig q = read_model_config(model_fixture("qwen2_moe_tiny"));
  EXPECT_EQ(q.moe.layer_moe, (std::vector<bool>{true, false, true}));
  EXPECT_GT(q.moe.shared_ffn, 0);
  EXPECT_FALSE(q.moe.norm_topk);
  const ModelConfig m = read_model_config(model_fixture("mixtral_tiny"));
  EXPECT_TRUE(m.moe.norm_topk);
  EXPECT_EQ(m.moe.n_experts, 5);
  EXPECT_EQ(expert_split_of(m, {2, nullptr}, 4, 3).ep_rank, 1);
  EXPECT_EQ(expert_split_of(m, {2, nullptr}, 4, 3).etp_rank, 1);
  EXPECT_EQ(expert_ranges(5, 2), (std::vector<Range>{{0, 3}, {3, 5}}));
}

// inspect's shard plan: at tp 4 x ep 2 an expert's tensor is read once over the TP group (by the
// two ranks of its EP rank, a slice each) and the shared expert's over all four.
TEST(MoeConfig, ShardPlanReadsEachExpertOnce) {
  const std::string dir = model_fixture("qwen2_moe_tiny");
  const ModelConfig c = read_model_config(dir);
  const auto plan = shard_plan(c, open_tensor_store(dir)->tensors(), 4, 2);
  int experts = 0;
  for (const TensorShardPlan& p : plan) {
    if (p.info.name.find("experts.") == std::string::npos && p.info.name.find("shared_expert.") == std::string::npos)
      continue;
    int64_t sum = 0, readers = 0;
    for (int64_t b : p.bytes) sum += b, readers += b > 0;
    EXPECT_EQ(sum, p.info.nbytes) << p.info.name;
    if (p.info.name.find(".experts.") != std::string::npos) {
      ++experts;
      EXPECT_LE(readers, 2) << p.info.name;
    }
  }
  EXPECT_EQ(experts, 2 * 6 * 3);  // 2 MoE layers x 6 experts x (gate, up, down)
}

// Errors name the problem: ep not dividing tp, more EP ranks than experts, ep on a dense model,
// a missing expert tensor (naming it and the file).
TEST(MoeConfig, BadSplitsAndMissingExpertsFailClearly) {
  const std::string mixtral = model_fixture("mixtral_tiny");
  auto error_of = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const ModelConfig m = read_model_config(mixtral);
  EXPECT_NE(error_of([&] { expert_split_of(m, {2, nullptr}, 3, 0); }).find("does not divide --tp 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { expert_split_of(m, {6, nullptr}, 6, 0); }).find("exceeds the 5 experts"),
            std::string::npos);
  const ModelConfig dense = read_model_config(model_fixture("llama_gqa"));
  EXPECT_NE(error_of([&] { expert_split_of(dense, {2, nullptr}, 2, 0); }).find("has no experts"), std::string::npos);
  // A checkpoint whose config promises 6 experts where the file has 5.
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / ("tp_moe_bad_" + std::to_string(test_seed()));
  fs::create_directories(tmp);
  std::ifstream in(mixtral + "/config.json");
  std::string cfg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "\"num_local_experts\": 5";
  ASSERT_NE(cfg.find(key), std::string::npos) << cfg;
  cfg.replace(cfg.find(key), key.size(), "\"num_local_experts\": 6");
  std::ofstream(tmp / "config.json") << cfg;
  fs::copy_file(mixtral + "/model.safetensors", tmp / "model.safetensors");
  const std::string what = error_of([&] { run_model_ranks(2, [&](Communicator& w) { load_model(tmp.string(), w); }); });
  EXPECT_NE(what.find("block_sparse_moe.gate.weight"), std::string::npos) << what;
  EXPECT_NE(what.find("model.safetensors"), std::string::npos) << what;
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace tensorpar::testing
