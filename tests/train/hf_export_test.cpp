// Export of GGUF-started llama runs: llama.cpp's per-head q/k row permutation undone (checked
// against the converter's reshape/swapaxes written out here, and against the HF fixture the GGUF
// was made from), the model config stored in every checkpoint, and the exported HF directory giving
// the GGUF model's logits. Bad checkpoints name what is missing.
#include "train/hf_export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "fixtures_dir.h"
#include "io/safetensors.h"
#include "io/sharded_checkpoint.h"
#include "model/tokenizer_loader.h"
#include "train/checkpoint.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace tensorpar::testing {
namespace {
namespace fs = std::filesystem;

std::string fresh_dir(const std::string& tag) {
  const fs::path p =
      fs::temp_directory_path() / ("tp_hfexport_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string gguf_fixture() { return model_fixture("llama_gqa_gguf") + "/model-f16.gguf"; }

// llama.cpp convert_hf_to_gguf's permute for one (heads*HS, cols) matrix, as its numpy does it:
// w.reshape(heads, 2, HS/2, cols).swapaxes(1, 2).reshape(heads*HS, cols). Output element
// (h, a, b, c) of the swapped (heads, HS/2, 2, cols) array is input element (h, b, a, c).
std::vector<float> llamacpp_permute(const std::vector<float>& w, int64_t heads, int64_t hs,
                                    int64_t cols) {
  std::vector<float> out(w.size(), NAN);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t a = 0; a < hs / 2; ++a)
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t c = 0; c < cols; ++c)
          out[size_t(((h * (hs / 2) + a) * 2 + b) * cols + c)] =
              w[size_t(((h * 2 + b) * (hs / 2) + a) * cols + c)];
  return out;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no Error thrown)";
}

// |a - ref| within f16 rounding of ref (the GGUF holds f16(ref)): half an ulp of f16, 2^-11
// relative, or 2^-25 absolute in the subnormal range.
bool within_f16(float a, float ref) {
  return std::fabs(double(a) - ref) <= std::max(std::fabs(double(ref)) * 0x1p-11, 0x1p-25);
}

TEST(GgufQkRows, UndoesTheConvertersPermutation) {
  Rng rng(31);
  for (auto [heads, hs, cols] : {std::tuple{1, 2, 1}, std::tuple{3, 8, 7}, std::tuple{2, 16, 33},
                                 std::tuple{5, 6, 1}}) {
    SCOPED_TRACE(std::to_string(heads) + " heads of " + std::to_string(hs) + ", " +
                 std::to_string(cols) + " cols");
    std::vector<float> hf(size_t(heads * hs * cols));
    for (float& x : hf) x = rng.uniform(-1, 1);
    const std::vector<float> gguf = llamacpp_permute(hf, heads, hs, cols);
    if (hs > 2) {  // with HS = 2 the permutation is the identity
      ASSERT_NE(gguf, hf);
    }
    const Tensor t = Tensor::from_f32({heads * hs, cols}, gguf);
    EXPECT_EQ(gguf_qk_rows_to_hf(t, hs).to_vector(), hf);
    if (cols == 1) {  // a bias: the same permutation of a 1-D tensor
      const Tensor b = Tensor::from_f32({heads * hs}, gguf);
      EXPECT_EQ(gguf_qk_rows_to_hf(b, hs).to_vector(), hf);
    }
  }
  const std::string e = error_of([] { gguf_qk_rows_to_hf(Tensor::zeros({12, 3}, DType::kF32), 8); });
  EXPECT_NE(e.find("[gguf_qk_rows_to_hf]"), std::string::npos) << e;
  EXPECT_NE(e.find("f32[12, 3]"), std::string::npos) << e;
}

TEST(StoredModelConfig, RoundTripsBothLayouts) {
  ModelConfig c = tiny_llama();
  nlohmann::json half;
  store_model_config(half, c);
  ASSERT_TRUE(half.contains("config"));
  EXPECT_FALSE(half.contains("config_interleaved_rope"));
  EXPECT_EQ(stored_model_config(half, "x").summary(), c.summary());
  c.rope.layout = RopeLayout::kInterleaved;
  c.rope.theta = 5e5;
  nlohmann::json inter;
  store_model_config(inter, c);
  // No "config": `train --resume` without --model must not read it as HF-ordered weights.
  EXPECT_FALSE(inter.contains("config"));
  const ModelConfig back = stored_model_config(inter, "x");
  EXPECT_EQ(back.rope.layout, RopeLayout::kInterleaved);
  EXPECT_EQ(back.summary(), c.summary());
  EXPECT_EQ(back.rope.theta, 5e5);

  const std::string none = error_of([] { stored_model_config(nlohmann::json::object(), "ck/step-3"); });
  EXPECT_NE(none.find("ck/step-3"), std::string::npos) << none;
  EXPECT_NE(none.find("no model config"), std::string::npos) << none;
  inter["config_interleaved_rope"].erase("tensorpar_rope_layout");
  const std::string missing = error_of([&] { stored_model_config(inter, "ck/step-4"); });
  EXPECT_NE(missing.find("ck/step-4"), std::string::npos) << missing;
  EXPECT_NE(missing.find("tensorpar_rope_layout"), std::string::npos) << missing;
}

// The layout and norm-offset keys of a stored config are type-checked: a checkpoint index whose
// "tensorpar_rope_layout" is not a string threw json's type_error out of resume and export.
TEST(StoredModelConfig, MistypedKeysAreErrors) {
  nlohmann::json inter;
  ModelConfig c = tiny_llama();
  c.rope.layout = RopeLayout::kInterleaved;
  store_model_config(inter, c);
  inter["config_interleaved_rope"]["tensorpar_rope_layout"] = 5;
  const std::string layout = error_of([&] { stored_model_config(inter, "ck/step-5"); });
  EXPECT_NE(layout.find("tensorpar_rope_layout '5'"), std::string::npos) << layout;
  nlohmann::json gemma = {{"config", {{"model_type", "gemma3_text"}, {"vocab_size", 64}, {"hidden_size", 32},
                                      {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"head_dim", 16},
                                      {"intermediate_size", 64}, {"tensorpar_norm_weight_offset", "1"}}}};
  const std::string offset = error_of([&] { stored_model_config(gemma, "ck/step-6"); });
  EXPECT_NE(offset.find("tensorpar_norm_weight_offset \"1\", expected 0 or 1"), std::string::npos) << offset;
  gemma["config"]["tensorpar_norm_weight_offset"] = 0;
  EXPECT_EQ(stored_model_config(gemma, "ck").norm_weight_offset, 0.0f);
  gemma["config"].erase("tensorpar_norm_weight_offset");
  EXPECT_EQ(stored_model_config(gemma, "ck").norm_weight_offset, 1.0f);
}

// The llama_gqa GGUF (f16, Q/K rows in llama.cpp's order) loaded at tp 2, checkpointed, exported: the HF directory holds llama_gqa's own weights (to f16 precision), a plain
// llama config.json, and at tp 1 gives the GGUF model's logits.
TEST(Export, GgufLlamaRunBecomesPlainHfDirectory) {
  const std::string root = fresh_dir("gguf"), out = root + "/hf";
  LoadOptions lo;
  lo.keep_quantized = false;
  run_model_ranks(2, [&](Communicator& world) {
    auto m = load_model(gguf_fixture(), world, lo);
    ASSERT_EQ(m->config().rope.layout, RopeLayout::kInterleaved);
    AdamW opt(AdamWConfig{});
    nlohmann::json state = nlohmann::json::object();
    store_model_config(state, m->config());  // as Trainer::save does
    save_checkpoint(root, 0, m->parameters(), opt, world, state);  // the GGUF weights as loaded
  });
  ShardedCheckpointReader r(root);
  EXPECT_FALSE(r.state().contains("config"));
  ASSERT_TRUE(r.state().contains("config_interleaved_rope"));

  EXPECT_GT(export_hf(root, out), 0);
  std::ifstream cf(out + "/config.json");
  const nlohmann::json cj = nlohmann::json::parse(cf);
  EXPECT_FALSE(cj.contains("tensorpar_rope_layout"));
  EXPECT_EQ(cj["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(cj["model_type"], "llama");
  const ModelConfig ref_cfg = read_model_config(model_fixture("llama_gqa"));
  const ModelConfig exp_cfg = read_model_config(out);
  EXPECT_EQ(exp_cfg.rope.layout, RopeLayout::kHalfSplit);
  EXPECT_EQ(exp_cfg.summary(), ref_cfg.summary());
  EXPECT_EQ(exp_cfg.max_position, ref_cfg.max_position);
  EXPECT_NEAR(exp_cfg.norm_eps, ref_cfg.norm_eps, 1e-12);  // the GGUF holds it as f32

  // Every exported tensor is llama_gqa's to f16 precision; q/k only once the rows are un-permuted.
  auto ref = SafetensorsFile::open(model_fixture("llama_gqa") + "/model.safetensors");
  auto exported = SafetensorsFile::open(out + "/model.safetensors");
  EXPECT_EQ(exported->tensors().size(), ref->tensors().size());
  for (const TensorInfo& ti : ref->tensors()) {
    SCOPED_TRACE(ti.name);
    ASSERT_TRUE(exported->find(ti.name).has_value());
    const std::vector<float> a = exported->read(ti.name).to_vector(), b = ref->read(ti.name).to_vector();
    ASSERT_EQ(a.size(), b.size());
    size_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i) bad += !within_f16(a[i], b[i]);
    EXPECT_EQ(bad, 0u);
    if (ti.name.find("_proj.weight") != std::string::npos &&
        (ti.name.find("q_proj") != std::string::npos || ti.name.find("k_proj") != std::string::npos)) {
      // As the checkpoint holds them (GGUF order), most rows are elsewhere.
      const std::vector<float> raw = r.read_full("param/" + ti.name).to_vector();
      size_t off = 0;
      for (size_t i = 0; i < raw.size(); ++i) off += !within_f16(raw[i], b[i]);
      EXPECT_GT(off, raw.size() / 2);
    }
  }

  // Logits: the GGUF model (interleaved RoPE) vs the export (half split), both at tp 1, f32.
  const std::vector<int64_t> ids = read_numbers<int64_t>(model_fixture("llama_gqa_gguf") + "/tokens.txt");
  const std::vector<int32_t> tokens(ids.begin(), ids.end());
  const int64_t T = int64_t(tokens.size()), V = ref_cfg.vocab_size;
  std::vector<float> from_gguf, from_export;
  run_model_ranks(1, [&](Communicator& world) {
    for (const std::string& path : {gguf_fixture(), out}) {
      auto m = load_model(path, world, lo);
      Tensor logits = Tensor::empty({T, V}, DType::kF32);
      logits.fill(NAN);
      auto cache = m->make_cache(T);
      m->forward(logits, tokens, *cache, false);
      (path == out ? from_export : from_gguf) = logits.to_vector();
    }
  });
  const std::vector<float> reference = read_f32_file(model_fixture("llama_gqa_gguf") + "/logits-f16.bin");
  ASSERT_EQ(from_gguf.size(), size_t(T * V));
  ASSERT_EQ(reference.size(), size_t(T * V));
  double diff = 0, diff_ref = 0;
  for (size_t i = 0; i < from_gguf.size(); ++i) {
    ASSERT_TRUE(std::isfinite(from_export[i])) << i;
    diff = std::max(diff, std::fabs(double(from_export[i]) - from_gguf[i]));
    diff_ref = std::max(diff_ref, std::fabs(double(from_export[i]) - reference[i]));
  }
  std::printf("  %lld x %lld logits: export vs GGUF max |diff| %.3g; vs transformers f64 %.3g\n",
              (long long)T, (long long)V, diff, diff_ref);
  EXPECT_LT(diff, 2e-5);
  EXPECT_LT(diff_ref, 5e-5);
  fs::remove_all(root);
}

// A Gemma 3 run's checkpoint and export carry Gemma's config (layer types, window, query scale,
// soft-capping, both RoPE bases), and the norm convention: a run holding norm weights as 1 + w
// (a GGUF Gemma, offset 0) exports HF's w. Both exports give the fixture's weights and logits.
TEST(Export, Gemma3RunKeepsItsConfigAndNormConvention) {
  for (const char* name : {"gemma3_tiny", "gemma3_pattern"})
    for (const float offset : {1.0f, 0.0f}) {
      SCOPED_TRACE(std::string(name) + " offset " + std::to_string(offset));
      const std::string src = model_fixture(name), root = fresh_dir("gemma"), out = root + "/hf";
      const ModelConfig ref = read_model_config(src);
      ModelConfig held = ref;
      held.norm_weight_offset = offset;
      run_model_ranks(2, [&](Communicator& world) {
        auto m = load_model(src, world);
        AdamW opt(AdamWConfig{});
        std::vector<ParamShard> params = m->parameters();
        if (offset == 0.0f)  // as llama.cpp's converter stores them
          for (ParamShard& p : params)
            if (p.name.ends_with("norm.weight")) {
              float* v = p.value->data<float>();
              for (int64_t i = 0; i < p.value->numel(); ++i) v[i] += 1.0f;
            }
        nlohmann::json state = nlohmann::json::object();
        store_model_config(state, held);
        save_checkpoint(root, 0, params, opt, world, state);
      });
      const ModelConfig stored = stored_model_config(ShardedCheckpointReader(root).state(), root);
      EXPECT_EQ(stored.norm_weight_offset, offset);
      EXPECT_GT(export_hf(root, out), 0);
      const ModelConfig back = read_model_config(out);
      EXPECT_EQ(back.summary(), ref.summary());
      EXPECT_EQ(back.layer_sliding, ref.layer_sliding);
      EXPECT_EQ(back.sliding_window, ref.sliding_window);
      EXPECT_NEAR(back.query_scale, ref.query_scale, 1e-12);
      EXPECT_EQ(back.final_logit_softcap, ref.final_logit_softcap);
      EXPECT_EQ(back.rope_local.theta, ref.rope_local.theta);
      EXPECT_EQ(back.norm_weight_offset, 1.0f);
      auto want = SafetensorsFile::open(src + "/model.safetensors");
      auto got = SafetensorsFile::open(out + "/model.safetensors");
      for (const TensorInfo& ti : want->tensors()) {
        ASSERT_TRUE(got->find(ti.name).has_value()) << ti.name;
        EXPECT_LE(max_abs_diff(got->read(ti.name).to_vector(), want->read(ti.name).to_vector()), 2.5e-7) << ti.name;
      }
      const std::vector<int64_t> ids = read_numbers<int64_t>(src + "/tokens.txt");
      const std::vector<int32_t> tokens(ids.begin(), ids.end());
      const int64_t T = int64_t(tokens.size());
      std::vector<float> logits[2];
      run_model_ranks(1, [&](Communicator& world) {
        for (int k = 0; k < 2; ++k) {
          auto m = load_model(k == 0 ? src : out, world);
          Tensor l = Tensor::empty({T, m->config().vocab_size}, DType::kF32);
          auto cache = m->make_cache(T);
          m->forward(l, tokens, *cache, false);
          logits[k] = l.to_vector();
        }
      });
      EXPECT_LE(max_abs_diff(logits[1], logits[0]), 1e-5);
      fs::remove_all(root);
    }
}

// The Trainer stores a GGUF llama run's config (interleaved layout) in its checkpoints.
TEST(Trainer, CheckpointOfGgufRunHasItsConfig) {
  const std::string root = fresh_dir("trainer");
  LoadOptions lo;
  lo.keep_quantized = false;
  TokenCorpus corpus;
  Rng rng(7);
  for (int i = 0; i < 300; ++i) corpus.train.push_back(int32_t(rng.integer(0, 256)));
  corpus.val = corpus.train;
  TrainOptions o;
  o.steps = 1;
  o.batch = 2;
  o.seq = 8;
  o.out_dir = root;
  run_model_ranks(2, [&](Communicator& world) {
    auto m = load_model(gguf_fixture(), world, lo);
    Trainer(*m, corpus, o).run(nullptr);  // saves step-1
  });
  ShardedCheckpointReader r(root);
  const ModelConfig c = stored_model_config(r.state(), r.dir());
  EXPECT_EQ(c.rope.layout, RopeLayout::kInterleaved);
  EXPECT_EQ(c.summary(), read_model_config(gguf_fixture()).summary());
  EXPECT_GT(export_hf(root, root + "/hf"), 0);
  // The checkpoint resumes into a model built from its own config (what `train --resume` does
  // without --model), but not into the exported half-split directory: same names and shapes,
  // q/k rows in the other order.
  run_model_ranks(2, [&](Communicator& world) {
    auto m = init_model(c, world, 1);
    Trainer t(*m, corpus, o);
    t.resume(root);
    EXPECT_EQ(t.step(), 1);
    auto hf = load_model(root + "/hf", world);
    Trainer wrong(*hf, corpus, o);
    const std::string e = error_of([&] { wrong.resume(root); });
    EXPECT_NE(e.find("interleaved RoPE"), std::string::npos) << e;
  });
  fs::remove_all(root);
}

// export_tokenizer: a GGUF's vocabulary written as tokenizer.json + tokenizer_config.json that
// load back to the GGUF tokenizer's ids; HF files copied; a vanished source is said, not fatal;
// a file that is no tokenizer is refused.
TEST(Export, TheRunsTokenizerTravelsWithTheExport) {
  const std::string root = fresh_dir("tok");
  const std::string gguf = gguf_fixture();
  fs::create_directories(root + "/from_gguf");
  const std::string said = export_tokenizer(gguf, root + "/from_gguf");
  EXPECT_NE(said.find("written as tokenizer.json"), std::string::npos) << said;
  EXPECT_TRUE(fs::exists(root + "/from_gguf/tokenizer_config.json"));
  const Tokenizer a = load_tokenizer(gguf), b = load_tokenizer(root + "/from_gguf");
  for (const std::string text : {"Hello, world!", "  two  spaces\n\tand a tab", "caf\xc3\xa9 123"}) {
    EXPECT_EQ(b.encode(text), a.encode(text)) << text;
    EXPECT_EQ(b.decode(a.encode(text)), a.decode(a.encode(text))) << text;
  }
  // An HF tokenizer.json (a file) and an HF directory are copied.
  const std::string json = test::fixtures_dir() + "/tokenizer/gpt2_trained.tokenizer.json";
  fs::create_directories(root + "/from_json");
  export_tokenizer(json, root + "/from_json");
  EXPECT_TRUE(fs::exists(root + "/from_json/tokenizer.json"));
  fs::create_directories(root + "/from_dir");
  EXPECT_NE(export_tokenizer(root + "/from_gguf", root + "/from_dir").find("tokenizer_config.json"),
            std::string::npos);
  EXPECT_TRUE(fs::exists(root + "/from_dir/tokenizer.json"));
  // Gone since the run: said, and nothing written.
  fs::create_directories(root + "/gone");
  EXPECT_NE(export_tokenizer(root + "/moved.gguf", root + "/gone").find("--tokenizer"), std::string::npos);
  EXPECT_FALSE(fs::exists(root + "/gone/tokenizer.json"));
  // Not a tokenizer.
  std::string e = error_of([&] { export_tokenizer(model_fixture("llama_gqa") + "/model.safetensors", root + "/gone"); });
  EXPECT_NE(e.find("neither a tokenizer.json"), std::string::npos) << e;
  e = error_of([&] { export_tokenizer(model_fixture("llama_gqa") + "/config.json", root + "/gone"); });
  EXPECT_NE(e.find("is not a tokenizer.json"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(root + "/gone/tokenizer.json"));
  EXPECT_EQ(export_tokenizer("", root + "/gone"), "");
  fs::remove_all(root);
}

// A checkpoint without any model config (as a GGUF llama run's were before configs were stored
// for every run) is refused naming the checkpoint and the missing keys.
TEST(Export, CheckpointWithoutConfigNamesWhatIsMissing) {
  const std::string root = fresh_dir("noconfig");
  run_model_ranks(2, [&](Communicator& world) {
    auto m = init_model(tiny_llama(), world, 3);
    AdamW opt(AdamWConfig{});
    save_checkpoint(root, 1, m->parameters(), opt, world, {{"seed", 1}});
  });
  const std::string e = error_of([&] { export_hf(root, root + "/hf"); });
  EXPECT_NE(e.find(root + "/step-1"), std::string::npos) << e;
  EXPECT_NE(e.find("no model config"), std::string::npos) << e;
  EXPECT_NE(e.find("\"config\""), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(root + "/hf/model.safetensors"));
  fs::remove_all(root);
}

}  // namespace
}  // namespace tensorpar::testing
