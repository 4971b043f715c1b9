// Sharded checkpoints: round trip, reshard (2 -> 3, 3 -> 1, tp 2 x pp 2 -> tp 3 x pp 1 and
// tp 1 x pp 3) with bitwise-equal assembled parameters and moments, crash safety (injected faults, and a child process killed while it
// saves), exact resume, and export to an HF directory that load_model reads back to the same
// logits.
#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/sharded_checkpoint.h"
#include "parallel/mesh.h"
#include "train/hf_export.h"
#include "train/pipeline.h"
#include "train/pipeline_schedule.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace tensorpar::testing {
namespace {
namespace fs = std::filesystem;

std::string fresh_dir(const std::string& tag) {
  const fs::path p =
      fs::temp_directory_path() / ("tp_ckpt_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

TokenCorpus random_corpus(int64_t n, int64_t vocab, uint64_t salt) {
  Rng rng(salt);
  TokenCorpus c;
  for (int64_t i = 0; i < n; ++i) c.train.push_back(int32_t(rng.integer(0, vocab)));
  for (int64_t i = 0; i < n / 4; ++i) c.val.push_back(int32_t(rng.integer(0, vocab)));
  return c;
}

TrainOptions small_options() {
  TrainOptions o;
  o.steps = 6;
  o.batch = 4;
  o.micro_batch = 2;
  o.seq = 16;
  o.lr = 3e-3f;
  o.warmup = 2;
  o.seed = 5;
  return o;
}

struct Snapshot {
  Gathered values, exp_avg, exp_avg_sq;
};

Snapshot snapshot(CausalLM& m, AdamW& opt, std::mutex& mu, Snapshot& s) {
  for (const ParamShard& p : m.parameters()) {
    gather_into(s.values, mu, p, *p.value);
    AdamWState& st = opt.state(p);
    gather_into(s.exp_avg, mu, p, st.exp_avg);
    gather_into(s.exp_avg_sq, mu, p, st.exp_avg_sq);
  }
  return s;
}

// Trains `steps` at tp_save, saves, then loads at each tp_load and assembles everything again.
TEST(ShardedCheckpoint, ReshardsBitwise) {
  const ModelConfig c = tiny_llama();
  const TokenCorpus corpus = random_corpus(4000, c.vocab_size, 1);
  for (auto [tp_save, tp_load] :
       {std::pair{2, 3}, std::pair{3, 1}, std::pair{2, 2}, std::pair{1, 4}}) {
    SCOPED_TRACE("save at tp " + std::to_string(tp_save) + ", load at tp " +
                 std::to_string(tp_load));
    const std::string root = fresh_dir("reshard");
    TrainOptions o = small_options();
    o.steps = 2;
    o.out_dir = root;
    Snapshot saved, loaded;
    std::mutex mu;
    run_model_ranks(tp_save, [&](Communicator& world) {
      auto m = init_model(c, world, 3);
      Trainer t(*m, corpus, o);
      t.run(nullptr);  // saves at the last step
      snapshot(*m, t.optimizer(), mu, saved);
    });
    ASSERT_TRUE(fs::exists(root + "/step-2/index.json"));
    std::vector<int64_t> steps(static_cast<size_t>(tp_load));
    run_model_ranks(tp_load, [&](Communicator& world) {
      auto m = init_model(c, world, 77);  // different weights: all must be overwritten
      AdamW opt(o.adam);
      const nlohmann::json st = load_checkpoint(root, m->parameters(), &opt);
      steps[size_t(world.rank())] = st["step"].get<int64_t>();
      EXPECT_EQ(opt.steps(), 2);
      snapshot(*m, opt, mu, loaded);
    });
    for (int64_t s : steps) EXPECT_EQ(s, 2);
    EXPECT_EQ(saved.values, loaded.values);
    EXPECT_EQ(saved.exp_avg, loaded.exp_avg);
    EXPECT_EQ(saved.exp_avg_sq, loaded.exp_avg_sq);
    ASSERT_FALSE(saved.values.empty());
    fs::remove_all(root);
  }
}

// The issue's 3D shapes: a tp 2 x pp 2 run's checkpoint (one file per (pp, tp) rank) loads at
// tp 3 x pp 1 and at tp 1 x pp 3 (and back at tp 2 x pp 2) with every parameter and both moments
// assembled bitwise equal to what the run held; a tied model's head copy is not a tensor of its own.
TEST(ShardedCheckpoint, ReshardsAcrossPipelineStagesBitwise) {
  for (bool tied : {false, true}) {
    ModelConfig c = tiny_llama();
    c.n_layers = 6;
    c.tie_embeddings = tied;
    const TokenCorpus corpus = random_corpus(4000, c.vocab_size, 3);
    const std::string root = fresh_dir(tied ? "reshard_pp_tied" : "reshard_pp");
    TrainOptions o = small_options();
    o.steps = 2;
    o.out_dir = root;
    Snapshot saved;
    std::mutex mu;
    run_model_ranks(4, [&](Communicator& world) {
      DeviceMesh mesh(world, {.tp = 2, .dp = 1, .pp = 2});
      const std::vector<LayerSpan> spans = split_layers(c.n_layers, 2);
      Transformer model(c, mesh.tp(), 32, spans[size_t(mesh.pp_rank())]);
      model.init_weights(5);
      Pipeline pipe(model, mesh.pp());
      Trainer t(model, corpus, o, nullptr, &pipe);
      t.run(nullptr);  // saves at the last step
      snapshot(model, t.optimizer(), mu, saved);
    });
    ASSERT_TRUE(fs::exists(root + "/step-2/index.json"));
    for (auto [tp, pp] : {std::pair{3, 1}, std::pair{1, 3}, std::pair{2, 2}}) {
      SCOPED_TRACE(std::string(tied ? "tied" : "untied") + ": load at tp " + std::to_string(tp) + " x pp " +
                   std::to_string(pp));
      Snapshot loaded;
      run_model_ranks(tp * pp, [&](Communicator& world) {
        DeviceMesh mesh(world, {.tp = tp, .dp = 1, .pp = pp});
        const std::vector<LayerSpan> spans = split_layers(c.n_layers, pp);
        Transformer model(c, mesh.tp(), 32, spans[size_t(mesh.pp_rank())]);
        model.init_weights(77);  // different weights: all must be overwritten
        AdamW opt(o.adam);
        const nlohmann::json st = load_checkpoint(root, model.parameters(), &opt);
        EXPECT_EQ(st["step"].get<int64_t>(), 2);
        EXPECT_EQ(opt.steps(), 2);
        snapshot(model, opt, mu, loaded);
      });
      EXPECT_EQ(saved.values, loaded.values);
      EXPECT_EQ(saved.exp_avg, loaded.exp_avg);
      EXPECT_EQ(saved.exp_avg_sq, loaded.exp_avg_sq);
      ASSERT_FALSE(saved.values.empty());
    }
    fs::remove_all(root);
  }
}

// Six steps straight equal three + save + (fresh process state) resume + three, bitwise.
TEST(Trainer, ResumeGivesExactlyTheUninterruptedLosses) {
  const ModelConfig c = tiny_llama();
  const TokenCorpus corpus = random_corpus(4000, c.vocab_size, 2);
  const int tp = 2;
  const std::string root = fresh_dir("resume");
  auto run = [&](int64_t steps, bool resume, bool save) {
    std::vector<float> losses;
    TrainOptions o = small_options();
    o.steps = steps;
    o.out_dir = save ? root : "";
    run_model_ranks(tp, [&](Communicator& world) {
      auto m = init_model(c, world, 11);
      Trainer t(*m, corpus, o);
      if (resume) {
        // The first run's --steps was 3: the note names the changed cosine length.
        const std::string note = t.resume(root);
        if (world.rank() == 0) {
          EXPECT_NE(note.find("--steps 3 -> 6"), std::string::npos) << note;
        }
      }
      t.run([&](const StepLog& l) {
        if (world.rank() == 0) losses.push_back(l.loss);
      });
    });
    return losses;
  };
  const std::vector<float> full = run(6, false, false);
  const std::vector<float> first = run(3, false, true);
  const std::vector<float> second = run(6, true, false);
  ASSERT_EQ(full.size(), 6u);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(second.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(first[i], full[i]) << "step " << i + 1;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(second[i], full[i + 3]) << "step " << i + 4;
  fs::remove_all(root);
}

// A save that fails midway (injected at each stage) leaves `latest` on the previous checkpoint,
// which still loads whole.
TEST(ShardedCheckpoint, FailedSaveKeepsPreviousCheckpoint) {
  const ModelConfig c = tiny_llama();
  const TokenCorpus corpus = random_corpus(4000, c.vocab_size, 3);
  for (int fail_at : {1, 2}) {
    SCOPED_TRACE("fail_at " + std::to_string(fail_at));
    const std::string root = fresh_dir("fault");
    TrainOptions o = small_options();
    o.steps = 1;
    o.out_dir = root;
    Snapshot first, loaded;
    std::mutex mu;
    EXPECT_THROW(run_model_ranks(2,
                                 [&](Communicator& world) {
                                   auto m = init_model(c, world, 4);
                                   Trainer t(*m, corpus, o);
                                   t.run(nullptr);  // step-1 saved
                                   snapshot(*m, t.optimizer(), mu, first);
                                   t.train_step();
                                   t.save(SaveFault{fail_at});
                                 }),
                 Error);
    EXPECT_EQ(resolve_checkpoint_dir(root), root + "/step-1");
    EXPECT_FALSE(fs::exists(root + "/step-2"));
    run_model_ranks(2, [&](Communicator& world) {
      auto m = init_model(c, world, 9);
      AdamW opt(o.adam);
      EXPECT_EQ(load_checkpoint(root, m->parameters(), &opt)["step"].get<int64_t>(), 1);
      snapshot(*m, opt, mu, loaded);
    });
    EXPECT_EQ(first.values, loaded.values);
    EXPECT_EQ(first.exp_avg_sq, loaded.exp_avg_sq);
    fs::remove_all(root);
  }
}

// A child process saves checkpoints in a loop (each one's tensors all filled with its step) and
// is killed with SIGKILL at a random moment; `latest` must name a whole, consistent checkpoint.
TEST(ShardedCheckpoint, SurvivesSigkillDuringSave) {
  Rng rng(5);
  for (int trial = 0; trial < 3; ++trial) {
    const std::string root = fresh_dir("kill" + std::to_string(trial));
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int64_t step = 1;; ++step) {
        const std::string tmp = root + "/.tmp-step-" + std::to_string(step);
        fs::create_directories(tmp);
        for (int r = 0; r < 2; ++r) {
          std::vector<ShardedTensor> ts;
          for (int k = 0; k < 4; ++k) {
            ShardedTensor t;
            t.name = std::string(1, char('a' + k));
            t.global_shape = {2 * 256, 1024};
            t.shard_dim = 0;
            t.begin = r * 256;
            t.end = (r + 1) * 256;
            t.tensor = Tensor::empty({256, 1024}, DType::kF32);
            t.tensor.fill(float(step));
            ts.push_back(t);
          }
          write_checkpoint_shard(tmp + "/" + checkpoint_shard_file(r, 2), ts);
        }
        write_checkpoint_index(tmp, 2, {{"step", step}});
        publish_checkpoint_dir(tmp, root, "step-" + std::to_string(step));
      }
    }
    // Let it publish at least once, then kill it somewhere in a later save.
    for (int i = 0; i < 2000 && !fs::exists(root + "/latest"); ++i) ::usleep(5000);
    ::usleep(useconds_t(rng.integer(0, 150000)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(fs::exists(root + "/latest"));
    ShardedCheckpointReader r(root);
    const float step = float(r.state()["step"].get<int64_t>());
    for (int k = 0; k < 4; ++k) {
      const std::vector<float> v = r.read_full(std::string(1, char('a' + k))).to_vector();
      ASSERT_EQ(v.size(), size_t(512 * 1024));
      for (float x : v) ASSERT_EQ(x, step) << r.dir();
    }
    std::printf("  trial %d: killed during a save; latest = %s (whole)\n", trial, r.dir().c_str());
    fs::remove_all(root);
  }
}

TEST(ShardedCheckpoint, ErrorsNameTheProblem) {
  const std::string root = fresh_dir("errors");
  EXPECT_THROW(ShardedCheckpointReader r(root), Error);
  ShardedTensor t{"a", Tensor::zeros({2, 3}, DType::kF32), {4, 3}, 0, 0,
                  3};  // 3 rows declared, 2 held
  EXPECT_THROW(write_checkpoint_shard(root + "/x.safetensors", {t}), Error);
  // Pieces that do not cover the tensor.
  const std::string tmp = root + "/.tmp";
  fs::create_directories(tmp);
  t.end = 2;
  write_checkpoint_shard(tmp + "/" + checkpoint_shard_file(0, 1), {t});
  write_checkpoint_index(tmp, 1, nlohmann::json::object());
  publish_checkpoint_dir(tmp, root, "step-0");
  ShardedCheckpointReader r(root);
  EXPECT_NO_THROW(r.read_slice("a", 0, 0, 2));
  try {
    r.read_full("a");
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  }
  fs::remove_all(root);
}

// index.json is checked when a checkpoint is opened: every field the reader relies on, with an
// Error naming it (before, a mistyped field threw json's type_error at first use, a piece past
// its tensor's shape reached the copy, and a file name could leave the checkpoint directory).
TEST(ShardedCheckpoint, IndexIsCheckedWhenOpened) {
  const nlohmann::json good = nlohmann::json::parse(R"({
    "format": "tensorpar-sharded-checkpoint-v1", "n_files": 2,
    "files": ["rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors"],
    "file_bytes": [100, 200], "file_xxh64": ["0123456789abcdef", "fedcba9876543210"],
    "tensors": {"w": {"global_shape": [4, 6], "shard_dim": 1, "pieces": [
      {"file": 0, "shard_dim": 1, "begin": 0, "end": 3}, {"file": 1, "shard_dim": 1, "begin": 3, "end": 6}]},
                "n": {"global_shape": [6], "shard_dim": -1, "pieces": [
      {"file": 0, "shard_dim": -1, "begin": 0, "end": 6}]}},
    "state": {"step": 3}})");
  auto refusal = [](const nlohmann::json& j) {
    try {
      (void)parse_checkpoint_index(j.dump(), "ck/index.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(refusal(good), "");
  const std::pair<const char*, const char*> cases[] = {
      {"/files/1", "\"../../etc/passwd\""},
      {"/files/0", "5"},
      {"/n_files", "3"},
      {"/file_bytes/0", "-1"},
      {"/file_xxh64/1", "\"xyz\""},
      {"/tensors/w/global_shape/0", "-4"},
      {"/tensors/w/global_shape", "[4611686018427387904, 4]"},
      {"/tensors/w/shard_dim", "2"},
      {"/tensors/w/pieces/1/file", "2"},
      {"/tensors/w/pieces/1/end", "7"},
      {"/tensors/w/pieces/1/begin", "\"3\""},
      {"/tensors/w/pieces/0", "[]"},
      {"/tensors/n", "7"},
      {"/tensors", "[]"},
      {"/state", "null"},
      {"/format", "1"},
  };
  for (const auto& [where, value] : cases) {
    nlohmann::json j = good;
    j[nlohmann::json::json_pointer(where)] = nlohmann::json::parse(value);
    const std::string what = refusal(j);
    EXPECT_NE(what.find("ck/index.json"), std::string::npos) << where << " = " << value << ": '" << what << "'";
  }
  nlohmann::json no_hash = good;
  no_hash.erase("file_xxh64");
  EXPECT_NE(refusal(no_hash).find("file_bytes and file_xxh64 come together"), std::string::npos) << refusal(no_hash);
  EXPECT_NE(refusal(nlohmann::json::array()).find("expected a JSON object"), std::string::npos);
  EXPECT_THROW((void)parse_checkpoint_index("{\"format\"", "ck/index.json"), Error);
  nlohmann::json deep_state = good;
  deep_state["state"]["run"] = nlohmann::json::parse(std::string(120, '[') + std::string(120, ']'));
  EXPECT_EQ(refusal(deep_state), "");  // deep, but within the limit
  const std::string deep = "{\"state\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_THROW((void)parse_checkpoint_index(deep, "ck/index.json"), Error);

  // The reads read_slice plans from the checked index: the overlap of each piece.
  const nlohmann::json index = parse_checkpoint_index(good.dump(), "ck");
  const std::vector<SlicePart> cols = plan_checkpoint_slice(index, "w", 1, 2, 5, "ck");
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[0].file, 0);
  EXPECT_EQ(cols[0].src_begin, 2);
  EXPECT_EQ(cols[0].dst_end, 1);
  EXPECT_EQ(cols[1].src_begin, 0);
  EXPECT_EQ(cols[1].src_end, 2);
  EXPECT_EQ(cols[1].dst_begin, 1);
  const std::vector<SlicePart> rows = plan_checkpoint_slice(index, "w", 0, 1, 3, "ck");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].shard_dim, 1);
  EXPECT_EQ(rows[1].shard_begin, 3);
  EXPECT_EQ(rows[1].src_end, 3);
  nlohmann::json gap = good;
  gap["tensors"]["w"]["pieces"][1]["begin"] = 4;
  EXPECT_THROW((void)plan_checkpoint_slice(parse_checkpoint_index(gap.dump(), "ck"), "w", 1, 0, 6, "ck"), Error);
  EXPECT_THROW((void)plan_checkpoint_slice(index, "w", 1, 0, 7, "ck"), Error);
  EXPECT_THROW((void)plan_checkpoint_slice(index, "absent", 0, 0, 1, "ck"), Error);

  // The reader goes through the same checks.
  const std::string root = fresh_dir("bad_index");
  nlohmann::json escape = good;
  escape["files"][0] = "../x.safetensors";
  std::ofstream(root + "/index.json") << escape.dump();
  try {
    ShardedCheckpointReader r(root);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("../x.safetensors"), std::string::npos) << e.what();
  }
  fs::remove_all(root);
}

// The trainer state that resume and export read is type-checked (before, a "step" of "3" or a
// "schedule" array threw json's type_error out of train --resume).
TEST(ShardedCheckpoint, StateFieldsAreChecked) {
  auto refusal = [](const std::string& text) {
    try {
      check_checkpoint_state(nlohmann::json::parse(text), "ck/index.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(refusal(R"({"step": 4, "optimizer_steps": 4, "tp": 2, "pp": 1, "seed": 18446744073709551615,
                        "tokenizer": "t.json", "data": "d.txt", "schedule": {"lr": 0.001, "steps": 6},
                        "run": {"batch": 4}})"),
            "");
  EXPECT_EQ(refusal("{}"), "");
  EXPECT_NE(refusal(R"({"step": "3"})").find("\"step\" is \"3\", expected an integer >= 0"), std::string::npos);
  EXPECT_NE(refusal(R"({"step": -1})").find("\"step\""), std::string::npos);
  EXPECT_NE(refusal(R"({"optimizer_steps": 1.5})").find("\"optimizer_steps\""), std::string::npos);
  EXPECT_NE(refusal(R"({"tokenizer": 7})").find("\"tokenizer\" is 7, expected a string"), std::string::npos);
  EXPECT_NE(refusal(R"({"schedule": [1]})").find("\"schedule\" is [1]"), std::string::npos);
  EXPECT_NE(refusal(R"({"schedule": {"lr": "fast"}})").find("\"schedule\".lr"), std::string::npos);
  EXPECT_NE(refusal(R"({"run": 3})").find("\"run\" is 3"), std::string::npos);
  EXPECT_EQ(refusal(R"({"divergence": {"loss_window": [3.5, 3.25], "skipped_batches": [5, 9]}})"), "");
  EXPECT_NE(refusal(R"({"divergence": []})").find("\"divergence\" is []"), std::string::npos);
  EXPECT_NE(refusal(R"({"divergence": {"loss_window": ["x"]}})").find("\"divergence\".loss_window"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"divergence": {"skipped_batches": [0]}})").find("batch numbers >= 1"), std::string::npos);
  EXPECT_NE(refusal(R"({"divergence": {"skipped_batches": 5}})").find("\"divergence\".skipped_batches"),
            std::string::npos);
  EXPECT_NE(refusal("[]").find("expected an object"), std::string::npos);
}

ModelConfig tiny_gpt2() {
  ModelConfig c;
  c.model_type = "gpt2";
  c.family = ArchFamily::kGpt2;
  c.vocab_size = 200;
  c.hidden = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.head_dim = 8;
  c.ffn = 128;
  c.max_position = 32;
  c.tie_embeddings = true;
  return c;
}

// Train at tp 2, save, export; the exported HF directory loaded at tp 1 gives the logits of the
// checkpoint loaded at tp 1 directly.
TEST(Export, HfDirectoryLoadsToTheSameLogits) {
  for (const ModelConfig& c : {tiny_llama(), tiny_gpt2()}) {
    SCOPED_TRACE(c.model_type);
    const std::string root = fresh_dir("export"), out = root + "/hf";
    const TokenCorpus corpus = random_corpus(3000, c.vocab_size, 4);
    TrainOptions o = small_options();
    o.steps = 2;
    o.out_dir = root;
    run_model_ranks(2, [&](Communicator& world) {
      auto m = init_model(c, world, 8);
      Trainer(*m, corpus, o).run(nullptr);
    });
    EXPECT_GT(export_hf(root, out), 0);
    EXPECT_EQ(read_model_config(out).summary(), c.summary());
    const std::vector<int32_t> tokens = {1, 7, 19, 3, 150, 42, 42, 9};
    std::vector<float> direct, exported;
    run_model_ranks(1, [&](Communicator& world) {
      auto a = init_model(c, world, 1);
      load_checkpoint(root, a->parameters(), nullptr);
      auto b = load_model(out, world);
      const int64_t T = int64_t(tokens.size());
      Tensor la = Tensor::empty({T, a->vocab_range().size()}, DType::kF32);
      Tensor lb = Tensor::empty({T, b->vocab_range().size()}, DType::kF32);
      auto ca = a->make_cache(16), cb = b->make_cache(16);
      a->forward(la, tokens, *ca, false);
      b->forward(lb, tokens, *cb, false);
      direct = la.to_vector();
      exported = lb.to_vector();
    });
    ASSERT_EQ(direct.size(), tokens.size() * size_t(c.vocab_size));
    EXPECT_EQ(direct, exported);
    fs::remove_all(root);
  }
}

// bf16 by hand: round to nearest, ties to even, on the f32 bits (finite values).
uint16_t bf16_bits_naive(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return uint16_t((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// `export --dtype bf16|f16`: every tensor in that dtype, each value the f32 export's value
// rounded once (bf16 by hand, f16 by the compiler's _Float16 conversion), torch_dtype said in
// config.json, and the 16-bit directory loads and runs.
TEST(Export, SixteenBitExportRoundsEachMasterValueOnce) {
  const ModelConfig c = tiny_llama();
  const std::string root = fresh_dir("export16");
  const TokenCorpus corpus = random_corpus(3000, c.vocab_size, 4);
  TrainOptions o = small_options();
  o.steps = 1;
  o.out_dir = root;
  run_model_ranks(1, [&](Communicator& world) {
    auto m = init_model(c, world, 8);
    Trainer(*m, corpus, o).run(nullptr);
  });
  const int64_t n = export_hf(root, root + "/f32");
  auto f32 = SafetensorsFile::open(root + "/f32/model.safetensors");
  for (const char* name : {"bf16", "f16"}) {
    SCOPED_TRACE(name);
    const DType dt = dtype_from_name(name);
    const std::string out = root + "/" + name;
    EXPECT_EQ(export_hf(root, out, dt), n);
    std::ifstream cf(out + "/config.json");
    EXPECT_EQ(nlohmann::json::parse(cf).at("torch_dtype"), dt == DType::kBF16 ? "bfloat16" : "float16");
    auto half = SafetensorsFile::open(out + "/model.safetensors");
    ASSERT_EQ(half->header().entries.size(), size_t(n));
    for (const auto& e : half->header().entries) {
      ASSERT_EQ(e.format->dtype, dt) << e.name;
      const StoredTensor a = f32->stored(e.name), b = half->stored(e.name);
      ASSERT_EQ(a.shape, b.shape) << e.name;
      const int64_t count = b.nbytes / 2;
      ASSERT_EQ(a.nbytes, 4 * count) << e.name;
      for (int64_t i = 0; i < count; ++i) {
        float x;
        uint16_t got, want;
        std::memcpy(&x, a.data + 4 * i, 4);
        std::memcpy(&got, b.data + 2 * i, 2);
        if (dt == DType::kBF16) {
          want = bf16_bits_naive(x);
        } else {
          const _Float16 h = static_cast<_Float16>(x);
          std::memcpy(&want, &h, 2);
        }
        ASSERT_EQ(got, want) << e.name << " element " << i << " value " << x;
      }
    }
    run_model_ranks(2, [&](Communicator& world) {
      auto m = load_model(out, world);
      EXPECT_EQ(m->config().summary(), c.summary());
    });
  }
  EXPECT_THROW(export_hf(root, root + "/q", DType::kQ4_1), Error);
  fs::remove_all(root);
}

}  // namespace
}  // namespace tensorpar::testing
