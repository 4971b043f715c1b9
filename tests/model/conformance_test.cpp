// Whole-model conformance: the tiny fixture models (tools/make_fixtures.py, references from
// transformers in float64) at TP 1..4 on the threads backend: logits within 1e-4 max abs,
// greedy tokens equal to greedy.txt at every TP size (KV-cache decode), incremental decode equal
// to one full forward, GGUF f16/q4_1 against their own references, and bad-input errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "fixtures_dir.h"
#include "io/safetensors_writer.h"
#include "model/model_test_util.h"
#include "model/tokenizer_loader.h"

namespace tensorpar::testing {
namespace {

struct Case {
  std::string dir;    // fixture model dir (HF) or gguf file path relative to models/
  std::string model;  // path passed to load_model
  std::string logits, tokens, greedy;
  double tol;
};

// int8: quantized weights multiply 8-bit activations (the inference default; the references
// multiply f32 activations).
std::vector<float> run_logits(const std::string& model_path, int tp, const std::vector<int64_t>& ids,
                              int64_t* vocab_out, bool tp_invariant = false, bool int8 = false) {
  std::vector<float> full;
  std::mutex mu;
  run_model_ranks(tp, [&](Communicator& world) {
    LoadOptions lo;
    lo.tp_invariant = tp_invariant;
    auto m = load_model(model_path, world, lo);
    m->set_int8_activations(int8);
    const int64_t V = m->config().vocab_size, T = int64_t(ids.size());
    {
      std::lock_guard<std::mutex> lock(mu);
      if (full.empty()) full.assign(size_t(T * V), NAN);
      *vocab_out = V;
    }
    world.barrier();
    auto cache = m->make_cache(T);
    Tensor logits = nan_tensor({T, m->vocab_range().size()});
    std::vector<int32_t> toks(ids.begin(), ids.end());
    m->forward(logits, toks, *cache, false);
    scatter_logits(full, logits, m->vocab_range(), V);
  });
  return full;
}

std::vector<int64_t> run_greedy(const std::string& model_path, int tp, const std::vector<int64_t>& ids, int n_new) {
  std::vector<int64_t> out;
  run_model_ranks(tp, [&](Communicator& world) {
    auto m = load_model(model_path, world);
    m->set_int8_activations(false);  // the references multiply f32 activations
    auto cache = m->make_cache(int64_t(ids.size()) + n_new);
    std::vector<int32_t> toks(ids.begin(), ids.end());
    Tensor logits = nan_tensor({1, m->vocab_range().size()});
    std::vector<int64_t> gen;
    for (int i = 0; i < n_new; ++i) {
      m->forward(logits, toks, *cache, true);
      const int64_t next = sharded_argmax(logits, m->vocab_range(), world);
      gen.push_back(next);
      toks = {int32_t(next)};
    }
    if (world.rank() == 0) out = gen;
  });
  return out;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"llama_gqa", model_fixture("llama_gqa"), "logits.bin", "tokens.txt", "greedy.txt", 1e-4},
      {"llama_odd", model_fixture("llama_odd"), "logits.bin", "tokens.txt", "greedy.txt", 1e-4},
      {"qwen2_bias", model_fixture("qwen2_bias"), "logits.bin", "tokens.txt", "greedy.txt", 1e-4},
      {"gpt2", model_fixture("gpt2"), "logits.bin", "tokens.txt", "greedy.txt", 1e-4},
      // Gemma 3 (tools/make_gemma3_fixtures.py): sliding-window local layers, q/k norms, GeGLU,
      // four norms per layer, soft-capped logits; one kv head replicated at tp > 1.
      {"gemma3_tiny", model_fixture("gemma3_tiny"), "logits.bin", "tokens.txt", "greedy.txt", 1e-4},
      {"gemma3_pattern", model_fixture("gemma3_pattern"), "logits.bin", "tokens.txt", "greedy.txt", 1e-4},
      // GGUF: the reference is transformers on exactly the dequantized weights; we compute with
      // the same weights (f16 -> f32; q4_1/q8_0 kept quantized, f32 activations).
      {"llama_gqa_gguf", model_fixture("llama_gqa_gguf/model-f16.gguf"), "logits-f16.bin", "tokens.txt",
       "greedy-f16.txt", 1e-4},
      {"llama_gqa_gguf", model_fixture("llama_gqa_gguf/model-q4_1.gguf"), "logits-q4_1.bin", "tokens.txt",
       "greedy-q4_1.txt", 1e-4},
  };
  return c;
}

class Conformance : public ::testing::TestWithParam<size_t> {};

TEST_P(Conformance, LogitsAndGreedyAtTp1To4) {
  const Case& c = cases()[GetParam()];
  const std::string dir = model_fixture(c.dir);
  const auto ids = read_id_lines(dir + "/" + c.tokens).at(0);
  const auto ref = read_f32_file(dir + "/" + c.logits);
  const auto greedy = read_id_lines(dir + "/" + c.greedy).at(0);
  for (int tp = 1; tp <= 4; ++tp) {
    SCOPED_TRACE(c.model + " tp " + std::to_string(tp));
    int64_t V = 0;
    const auto got = run_logits(c.model, tp, ids, &V);
    ASSERT_EQ(got.size(), ref.size());
    const double err = max_abs_diff(got, ref);
    EXPECT_LE(err, c.tol);
    std::printf("  %s tp %d: max abs logit error %.3g (tolerance %.0e)\n", c.model.c_str(), tp, err, c.tol);
    EXPECT_EQ(run_greedy(c.model, tp, ids, int(greedy.size())), greedy);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Conformance, ::testing::Range<size_t>(0, 8), [](const auto& info) {
  const Case& c = cases()[info.param];
  std::string n = std::filesystem::path(c.model).filename().string();
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

// GPT-2 with `tie_word_embeddings: false` reads its own `lm_head.weight`: the fixture's weights
// with a head of 2 x wte give twice transformers' logits of the tied model (the head is the last
// linear and has no bias) at tp 1-3, so a head left unloaded or read from wte fails; training
// lists the head as a parameter and the stored config keeps it untied.
TEST(Gpt2UntiedHead, ReadsItsOwnLmHead) {
  const std::string src = model_fixture("gpt2");
  const std::string dir = ::testing::TempDir() + "gpt2_untied_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  {
    std::ifstream in(src + "/config.json");
    nlohmann::json cfg = nlohmann::json::parse(in);
    cfg["tie_word_embeddings"] = false;
    std::ofstream(dir + "/config.json") << cfg.dump(2);
  }
  auto st = SafetensorsFile::open(src + "/model.safetensors");
  std::vector<NamedTensor> tensors;
  for (const TensorInfo& t : st->tensors()) tensors.push_back({t.name, st->read(t.name)});
  Tensor head = st->read("transformer.wte.weight");
  float* h = head.data<float>();
  for (int64_t i = 0; i < head.numel(); ++i) h[i] *= 2.0f;
  tensors.push_back({"lm_head.weight", head});
  save_safetensors(dir + "/model.safetensors", tensors);

  const auto ids = read_id_lines(src + "/tokens.txt").at(0);
  auto ref = read_f32_file(src + "/logits.bin");
  for (float& v : ref) v *= 2.0f;
  for (int tp = 1; tp <= 3; ++tp) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    int64_t V = 0;
    const auto got = run_logits(dir, tp, ids, &V);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_LE(max_abs_diff(got, ref), 2e-4);
  }
  run_model_ranks(1, [&](Communicator& world) {
    auto m = load_model(dir, world);
    EXPECT_FALSE(m->config().tie_embeddings);
    bool listed = false;
    for (const ParamShard& p : m->parameters()) listed |= p.name == "lm_head.weight";
    EXPECT_TRUE(listed);
  });
  std::filesystem::remove_all(dir);
}

// --tp-invariant: the row-parallel layers hold whole rows, so the logits at tp 2, 3 and 4 are
// bitwise those of tp 1 (uneven head and ffn splits at 3; quantized weights with 8-bit
// activations, whose rounding amplifies any last-bit difference; biases added after the sum; an
// MoE layer's experts and shared expert).
TEST(TpInvariant, LogitsBitwiseTheSameAtEveryTp) {
  struct Run {
    std::string dir, model;  // fixture directory (tokens.txt), model path
    bool int8;
  };
  const Run runs[] = {{"gemma3_tiny", "gemma3_tiny", false},
                      {"gpt2", "gpt2", false},
                      {"llama_odd", "llama_odd", false},
                      {"qwen2_moe_tiny", "qwen2_moe_tiny", false},
                      {"llama_gqa_gguf", "llama_gqa_gguf/model-q4_1.gguf", true}};
  for (const Run& r : runs) {
    const auto ids = read_id_lines(model_fixture(r.dir) + "/tokens.txt").at(0);
    int64_t V = 0;
    const auto one = run_logits(model_fixture(r.model), 1, ids, &V, false, r.int8);
    ASSERT_FALSE(one.empty());
    for (int tp = 1; tp <= 4; ++tp) {
      SCOPED_TRACE(r.model + " tp " + std::to_string(tp));
      const auto got = run_logits(model_fixture(r.model), tp, ids, &V, true, r.int8);
      ASSERT_EQ(got.size(), one.size());
      EXPECT_EQ(std::memcmp(got.data(), one.data(), one.size() * sizeof(float)), 0)
          << "max abs difference " << max_abs_diff(got, one);
    }
  }
}

// Prefill in uneven chunks (5, 1, rest) through the KV cache equals one full forward.
TEST(KvCache, IncrementalEqualsFull) {
  const std::string path = model_fixture("llama_gqa");
  const auto ids = read_id_lines(path + "/tokens.txt").at(0);
  for (int tp : {1, 3}) {
    run_model_ranks(tp, [&](Communicator& world) {
      auto m = load_model(path, world);
      const int64_t T = int64_t(ids.size()), Vl = m->vocab_range().size();
      std::vector<int32_t> toks(ids.begin(), ids.end());
      auto full_cache = m->make_cache(T);
      Tensor full = nan_tensor({T, Vl});
      m->forward(full, toks, *full_cache, false);
      auto cache = m->make_cache(T + 3);
      const int64_t cuts[] = {0, 5, 6, T};
      std::vector<float> inc;
      for (int i = 0; i < 3; ++i) {
        const int64_t n = cuts[i + 1] - cuts[i];
        Tensor part = nan_tensor({n, Vl});
        m->forward(part, std::span<const int32_t>(toks).subspan(size_t(cuts[i]), size_t(n)), *cache, false);
        auto v = part.to_vector();
        inc.insert(inc.end(), v.begin(), v.end());
      }
      EXPECT_EQ(cache->length(), T);
      EXPECT_LE(max_abs_diff(inc, full.to_vector()), 1e-5);
      // truncate and redo the last token: same logits as the last row of the full run.
      cache->truncate(T - 1);
      Tensor last = nan_tensor({1, Vl});
      m->forward(last, std::span<const int32_t>(toks).subspan(size_t(T - 1)), *cache, true);
      EXPECT_LE(max_abs_diff(last.to_vector(), full.slice(0, T - 1, T).to_vector()), 1e-5);
    });
  }
}

// load_tokenizer takes an HF directory, a tokenizer.json file itself, or a GGUF file; anything
// else is refused naming the path.
TEST(LoadTokenizer, DirectoryAndJsonFileAgree) {
  namespace fs = std::filesystem;
  const std::string file = test::fixtures_dir() + "/tokenizer/gpt2_trained.tokenizer.json";
  const fs::path dir = fs::temp_directory_path() / ("tp_tok_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(file, dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  const Tokenizer from_file = load_tokenizer(file);
  const Tokenizer from_dir = load_tokenizer(dir.string());
  const std::string text = "The capital of France is Paris. 1234 tokens!";
  EXPECT_GT(from_file.encode(text).size(), 5u);
  EXPECT_EQ(from_file.encode(text), from_dir.encode(text));
  EXPECT_EQ(from_file.vocab_size(), from_dir.vocab_size());
  fs::remove_all(dir);
  for (const std::string& bad : {model_fixture("llama_gqa") + "/model.safetensors", dir.string()}) {
    try {
      (void)load_tokenizer(bad);
      ADD_FAILURE() << bad << " read as a tokenizer";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(LoadModel, ShapeMismatchNamesFileAndTensor) {
  const std::string src = model_fixture("llama_gqa");
  const auto tmp = std::filesystem::temp_directory_path() / ("tp_model_bad_" + std::to_string(test_seed()));
  std::filesystem::create_directories(tmp);
  std::ifstream in(src + "/config.json");
  std::string cfg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "\"intermediate_size\": 96";
  ASSERT_NE(cfg.find(key), std::string::npos);
  cfg.replace(cfg.find(key), key.size(), "\"intermediate_size\": 64");
  std::ofstream(tmp / "config.json") << cfg;
  std::filesystem::copy_file(src + "/model.safetensors", tmp / "model.safetensors");
  try {
    run_model_ranks(2, [&](Communicator& world) { load_model(tmp.string(), world); });
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("mlp.gate_proj.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("model.safetensors"), std::string::npos) << what;
  }
  std::filesystem::remove(tmp / "model.safetensors");  // now a missing tensor file
  EXPECT_THROW(read_model_config((tmp / "nope").string()), Error);
  std::filesystem::remove_all(tmp);
}

}  // namespace
}  // namespace tensorpar::testing
