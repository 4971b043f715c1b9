// The serving engine on the default model (models/SmolLM2-135M-Instruct.Q4_1.gguf, fetched by
// tools/fetch_model.sh; skipped when absent) at TP 1 and 2: sixteen concurrent greedy requests of
// different lengths, some sharing a prefix, through a KV pool small enough to force preemption,
// each produce exactly the tokens the one-request generation loop produces for it alone. Also:
// stop strings cut the text, a cancelled request ends with "abort" and frees its blocks, bad
// requests are refused with the right status, and stop() ends run() on every rank.
#include <gtest/gtest.h>

#include <deque>
#include <filesystem>
#include <optional>
#include <thread>

#include "fixtures_dir.h"
#include "infer/generate.h"
#include "model/load_model.h"
#include "parallel/mesh.h"
#include "model/model_test_util.h"
#include "model/tokenizer_loader.h"
#include "serve/engine.h"

namespace tensorpar {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

std::string model_path() { return test::fixtures_dir() + "/../../models/SmolLM2-135M-Instruct.Q4_1.gguf"; }
// A 2-layer llama (6/2 heads, 128 positions, byte-level tokenizer inside): fast enough for the
// ThreadSanitizer run.
std::string tiny_model_path() { return test::fixtures_dir() + "/models/llama_gqa_gguf/model-q4_1.gguf"; }


// Runs fn on a thread that is always joined (also when run() throws on this rank).
class Client {
 public:
  explicit Client(std::function<void()> fn) : t_(std::move(fn)) {}
  Client() = default;
  ~Client() {
    if (t_.joinable()) t_.join();
  }

 private:
  std::thread t_;
};

struct Collected {
  std::vector<int32_t> tokens;
  std::string text, reason;
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// Each prompt's greedy tokens, generated alone one after another (n_new each, EOS ignored):
// written into want on the rank given the tokenizer. Collective over the model's tp.
void generate_alone(CausalLM& m, const std::vector<std::vector<int32_t>>& prompts, int64_t n_new,
                    const Tokenizer* tok, std::vector<std::vector<int32_t>>& want) {
  GenerateOptions g;
  g.max_tokens = n_new;
  g.stop_on_eos = false;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto cache = m.make_cache(int64_t(prompts[i].size()) + n_new);
    const GenerateResult r = generate(m, *cache, prompts[i], g, tok, nullptr);
    if (tok) want[i] = r.tokens;
  }
}

Collected collect(RequestHandle& h) {
  Collected c;
  for (;;) {
    auto chunk = h.next(std::chrono::milliseconds(200));
    if (!chunk) continue;
    c.text += chunk->text;
    c.tokens.insert(c.tokens.end(), chunk->tokens.begin(), chunk->tokens.end());
    if (chunk->finished) {
      c.reason = chunk->finish_reason;
      c.prompt_tokens = chunk->prompt_tokens;
      c.completion_tokens = chunk->completion_tokens;
      return c;
    }
  }
}

TEST(Engine, ConcurrentRequestsEqualTheirSoloRuns) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "no " << model_path() << " (run tools/fetch_model.sh)";
  if (kSanitized) GTEST_SKIP() << "too slow under sanitizers";
  const Tokenizer tok = load_tokenizer(model_path());
  const std::string shared = "You are a helpful assistant who answers in one short sentence about geography. ";
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 16; ++i) {
    std::string text = (i % 3 == 0 ? shared : std::string()) + "Question " + std::to_string(i) + ": name a river";
    for (int k = 0; k < i % 5; ++k) text += " that is long and wide";
    prompts.push_back(tok.encode(text));
  }
  constexpr int64_t kNew = 10;
  // pp 2: two pipeline stages (StagedModel), a step's rows cut into micro-batches of >= 8 rows.
  struct Layout {
    int tp, pp;
    DType kv;
  };
  for (auto [tp, pp, kv] : {Layout{1, 1, DType::kF32}, Layout{2, 1, DType::kF32}, Layout{2, 1, DType::kF16},
                            Layout{1, 2, DType::kF32}}) {
    SCOPED_TRACE("tp " + std::to_string(tp) + " pp " + std::to_string(pp) + " kv " + std::string(dtype_name(kv)));
    std::vector<Collected> got(prompts.size());
    std::vector<std::vector<int32_t>> want(prompts.size());
    int64_t preemptions = 0;
    testing::run_model_ranks(tp * pp, [&](Communicator& world) {
      std::optional<DeviceMesh> mesh;
      std::unique_ptr<CausalLM> m;
      if (pp > 1) {
        mesh.emplace(world, MeshSizes{.tp = tp, .pp = pp});
        m = load_pipeline_stage(model_path(), mesh->tp(), mesh->pp(), world, {}, {}, 8);
      } else {
        m = load_model(model_path(), world);
      }
      m->set_kv_dtype(kv);  // the cache of the solo runs and of the engine alike
      const bool leader = world.rank() == 0;
      // Alone, one after another, through the one-sequence generation loop.
      generate_alone(*m, prompts, kNew, leader ? &tok : nullptr, want);
      // Together: a pool of 24 blocks of 16 tokens cannot hold all sixteen at once.
      EngineOptions o;
      o.max_seqs = 16, o.max_batch_tokens = 64, o.block_size = 16, o.ctx = 256;
      int64_t bpt = m->kv_bytes_per_token();  // the rank with the most kv heads sizes the pool
      world.all_reduce(&bpt, &bpt, 1, DType::kI64, ReduceOp::kMax);
      o.kv_cache_mb = (24 * 16 * bpt + (1 << 20) - 1) >> 20;
      Engine e(*m, leader ? &tok : nullptr, o);
      std::optional<Client> client;
      if (leader)
        client.emplace([&] {
          std::vector<std::shared_ptr<RequestHandle>> hs;
          GenerationParams p;
          p.max_tokens = kNew;
          p.ignore_eos = true;
          for (const auto& pr : prompts) hs.push_back(e.submit(pr, p));
          for (size_t i = 0; i < hs.size(); ++i) got[i] = collect(*hs[i]);
          preemptions = e.metrics().preemptions.load();
          e.stop(0);
        });
      try {
        e.run();
      } catch (const std::exception& ex) {
        ADD_FAILURE() << "run: " << ex.what();
        throw;
      }
    });
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i]) << "request " << i;
      EXPECT_EQ(got[i].reason, "length");
      EXPECT_EQ(got[i].completion_tokens, kNew);
      EXPECT_EQ(got[i].prompt_tokens, int64_t(prompts[i].size()));
      EXPECT_EQ(got[i].text, tok.decode(want[i])) << "request " << i;
    }
    EXPECT_GT(preemptions, 0) << "the pool was meant to be too small for all sixteen";
  }
}

// --kv-dtype f16: the same --kv-cache-mb holds twice the blocks.
TEST(Engine, F16CacheHoldsTwiceTheBlocks) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "no " << model_path() << " (run tools/fetch_model.sh)";
  const Tokenizer tok = load_tokenizer(model_path());
  int64_t blocks[2] = {0, 0};
  testing::run_model_ranks(1, [&](Communicator& world) {
    auto m = load_model(model_path(), world);
    EngineOptions o;
    o.kv_cache_mb = 64, o.ctx = 256;
    for (int i = 0; i < 2; ++i) {
      m->set_kv_dtype(i == 0 ? DType::kF32 : DType::kF16);
      Engine e(*m, &tok, o);
      blocks[i] = e.metrics().kv_blocks_total;
    }
  });
  EXPECT_GT(blocks[0], 0);
  EXPECT_EQ(blocks[1], 2 * blocks[0]);
}

TEST(Engine, StopStringsCancellationAndBadRequests) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "no " << model_path() << " (run tools/fetch_model.sh)";
  if (kSanitized) GTEST_SKIP() << "too slow under sanitizers";
  const Tokenizer tok = load_tokenizer(model_path());
  const std::vector<int32_t> prompt = tok.encode("The capital of France is Paris. The capital of Italy is");
  testing::run_model_ranks(2, [&](Communicator& world) {
    auto m = load_model(model_path(), world);
    const bool leader = world.rank() == 0;
    EngineOptions o;
    o.ctx = 128, o.max_queue = 4;
    Engine e(*m, leader ? &tok : nullptr, o);
    std::optional<Client> client;
    if (leader)
      client.emplace([&] {
        GenerationParams p;
        p.max_tokens = 24;
        p.ignore_eos = true;
        const Collected plain = collect(*e.submit(prompt, p));
        ASSERT_GE(plain.text.size(), 4u);
        // A stop string from the middle of that text cuts it there.
        const std::string stop = plain.text.substr(plain.text.size() / 2, 3);
        p.stop = {stop};
        const Collected cut = collect(*e.submit(prompt, p));
        EXPECT_EQ(cut.reason, "stop");
        EXPECT_EQ(cut.text, plain.text.substr(0, plain.text.find(stop)));
        // Cancelled: ends with "abort" and its blocks come back.
        p.stop.clear();
        p.max_tokens = 100;
        auto h = e.submit(prompt, p);
        ASSERT_TRUE(h->next(std::chrono::seconds(60)).has_value());  // it is running
        h->cancel();
        EXPECT_EQ(collect(*h).reason, "abort");
        for (int i = 0; i < 1200 && e.metrics().kv_blocks_used.load() != 0; ++i)  // up to a minute
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_EQ(e.metrics().kv_blocks_used.load(), 0);
        // Refusals.
        auto status = [&](std::vector<int32_t> pr, GenerationParams q) {
          try {
            e.submit(std::move(pr), q);
          } catch (const SubmitError& err) {
            return err.status;
          }
          return 200;
        };
        GenerationParams big;
        big.max_tokens = 128;
        EXPECT_EQ(status(prompt, big), 400);  // prompt + max_tokens over the context of 128
        EXPECT_EQ(status({}, p), 400);
        EXPECT_EQ(status({int32_t(m->config().vocab_size)}, p), 400);
        e.stop(0);
        EXPECT_EQ(status(prompt, p), 503);
      });
    e.run();
  });
}

// The request queue from several client threads at once (what the HTTP threads do), on the tiny
// fixture at tp 2: three threads submit four requests each and collect them while the engine
// steps; one more request is cancelled mid-run. Each finished request has exactly the tokens of
// its solo generation, the cancelled one ends with "abort", and stop() ends run() on every rank.
// Run under ThreadSanitizer too (the tsan preset).
TEST(Engine, ClientThreadsShareTheQueue) {
  const Tokenizer tok = load_tokenizer(tiny_model_path());
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) prompts.push_back(tok.encode("Request " + std::to_string(i) + std::string(size_t(i % 4), '!')));
  constexpr int64_t kNew = 6;
  std::vector<Collected> got(prompts.size());
  std::vector<std::vector<int32_t>> want(prompts.size());
  std::string cancelled_reason;
  testing::run_model_ranks(2, [&](Communicator& world) {
    auto m = load_model(tiny_model_path(), world);
    const bool leader = world.rank() == 0;
    generate_alone(*m, prompts, kNew, leader ? &tok : nullptr, want);
    EngineOptions o;
    o.max_seqs = 4, o.max_batch_tokens = 32, o.block_size = 16, o.ctx = 128;
    Engine e(*m, leader ? &tok : nullptr, o);
    std::optional<Client> main_client;
    if (leader)
      main_client.emplace([&] {
        {
          std::deque<Client> clients;  // joined when it goes (a deque never moves them)
          for (int c = 0; c < 3; ++c)
            clients.emplace_back([&, c] {
              GenerationParams p;
              p.max_tokens = kNew;
              p.ignore_eos = true;
              std::vector<std::pair<size_t, std::shared_ptr<RequestHandle>>> hs;
              for (size_t i = size_t(c); i < prompts.size(); i += 3) hs.emplace_back(i, e.submit(prompts[i], p));
              for (auto& [i, h] : hs) got[i] = collect(*h);
            });
          GenerationParams p;
          p.max_tokens = 100;
          p.ignore_eos = true;
          auto h = e.submit(prompts[0], p);
          h->cancel();
          cancelled_reason = collect(*h).reason;
        }  // the clients are joined here
        e.stop(0);
      });
    e.run();
  });
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i]) << "request " << i;
    EXPECT_EQ(got[i].reason, "length") << "request " << i;
  }
  EXPECT_EQ(cancelled_reason, "abort");
}

}  // namespace
}  // namespace tensorpar
