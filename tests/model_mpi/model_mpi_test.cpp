// Conformance under MPI (one rank per process): every rank loads its slice of each tiny fixture
// model; gathered logits equal transformers' logits.bin, greedy decoding equals greedy.txt; on the
// training batch the loss and every parameter's gradient (gathered from the shards of all ranks)
// match PyTorch's grads.safetensors, and three AdamW steps give PyTorch's losses and
// params_after_3_steps.safetensors. Per-tensor ||a - b|| / ||b|| <= 1e-4. The world is the TP
// group, except in TrainerMpi, where it is the data-parallel group of tp 1 replicas.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "comm/launch.h"
#include "infer/generate.h"
#include "infer/perplexity.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/load_model.h"
#include "model/model_test_util.h"
#include "test_util.h"
#include "train/optimizer.h"
#include "train/trainer.h"
#include "parallel/mesh.h"

namespace tensorpar::testing {
namespace {

// Runs fn on this process's rank of the MPI world.
void on_mpi_world(const std::function<void(Communicator&)>& fn) {
  LaunchConfig lc;
  lc.backend = Backend::kMpi;
  launch_ranks(lc, fn);
}

// Tensor t of parameter p (its value or gradient) assembled from every rank's shard, the same on
// every rank; owner[i] is the rank whose shard gave element i (for Replicated: this rank, whose
// own copy is `full`; `copies_differ` lists the ranks whose copy is not bitwise this one).
struct Assembled {
  std::vector<float> full;
  std::vector<float> owner;
  std::vector<int> copies_differ;
};

Assembled assemble(const ParamShard& p, const Tensor& t, Communicator& world) {
  const int n = world.size();
  const std::vector<float> mine = t.to_vector();
  // Every rank's (name hash, range, numel): the same parameter in the same order everywhere.
  const int64_t meta[4] = {int64_t(std::hash<std::string>{}(p.name) >> 1), p.range.begin,
                           p.range.end, int64_t(mine.size())};
  std::vector<int64_t> metas(static_cast<size_t>(4 * n));
  world.all_gather(meta, metas.data(), 4, DType::kI64);
  int64_t most = 0;
  for (int r = 0; r < n; ++r) {
    TP_CHECK(metas[size_t(4 * r)] == meta[0], "[assemble] parameter order: rank ", r, " is not at ",
             p.name);
    most = std::max(most, metas[size_t(4 * r + 3)]);
  }
  std::vector<float> padded(static_cast<size_t>(most), 0.0f), all(static_cast<size_t>(most * n));
  std::copy(mine.begin(), mine.end(), padded.begin());
  world.all_gather(padded.data(), all.data(), most, DType::kF32);
  Assembled out;
  if (p.shard_dim < 0) {  // Replicated: compared directly, and every copy equal.
    out.full = mine;
    out.owner.assign(mine.size(), float(world.rank()));
    for (int r = 0; r < n; ++r)
      if (!std::equal(mine.begin(), mine.end(), all.begin() + r * most))
        out.copies_differ.push_back(r);
    return out;
  }
  Gathered full, owner;
  std::mutex mu;
  for (int r = 0; r < n; ++r) {
    ParamShard q = p;
    q.range = {metas[size_t(4 * r + 1)], metas[size_t(4 * r + 2)]};
    const int64_t numel = metas[size_t(4 * r + 3)];
    const std::vector<float> v(all.begin() + r * most, all.begin() + r * most + numel);
    gather_into(full, mu, q, Tensor::from_f32({numel}, v));
    gather_into(owner, mu, q,
                Tensor::from_f32({numel}, std::vector<float>(size_t(numel), float(r))));
  }
  out.full = std::move(full[p.name]);
  out.owner = std::move(owner[p.name]);
  return out;
}

// Each rank's part of the error of got against want: "rank r: ratio" over the elements it gave.
std::string blame(const Assembled& got, const std::vector<float>& want, int n) {
  std::vector<double> d(static_cast<size_t>(n)), nn(static_cast<size_t>(n));
  for (size_t i = 0; i < want.size(); ++i) {
    const int r = std::isnan(got.owner[i]) ? 0 : int(got.owner[i]);
    d[size_t(r)] += (double(got.full[i]) - want[i]) * (double(got.full[i]) - want[i]);
    nn[size_t(r)] += double(want[i]) * want[i];
  }
  std::ostringstream os;
  for (int r = 0; r < n; ++r)
    os << " rank " << r << "'s elements: "
       << std::sqrt(nn[size_t(r)] > 0 ? d[size_t(r)] / nn[size_t(r)] : d[size_t(r)]) << ";";
  return os.str();
}

// Every parameter's gradient (grads) or value, assembled, against the fixture `ref` in our
// layout: per-tensor norm ratio <= tol(name), every fixture tensor compared. Returns the worst.
double compare_parameters(CausalLM& model, Communicator& world, const SafetensorsFile& ref,
                          bool grads, const std::function<double(const std::string&)>& tol) {
  const std::string what = grads ? "gradient" : "parameter";
  std::map<std::string, Shape> shapes;
  double worst = 0;
  for (const ParamShard& p : model.parameters()) {
    const Tensor* t = grads ? p.grad : p.value;
    if (t == nullptr) {
      ADD_FAILURE() << p.name << " has no " << what << " on rank " << world.rank();
      continue;
    }
    shapes[p.name] = p.global_shape;
    const Assembled got = assemble(p, *t, world);
    const std::vector<float> want = fixture_tensor(ref, p.name, p.global_shape);
    if (got.full.size() != want.size()) {
      ADD_FAILURE() << what << " " << p.name << " on rank " << world.rank() << ": "
                    << got.full.size() << " elements, fixture has " << want.size();
      continue;
    }
    const double r = norm_ratio(got.full, want);
    worst = std::max(worst, r);
    EXPECT_LE(r, tol(p.name)) << what << " " << p.name << " on rank " << world.rank()
                              << " (shard_dim " << p.shard_dim << "): norm ratio vs " << ref.path()
                              << ";" << blame(got, want, world.size());
    EXPECT_TRUE(got.copies_differ.empty())
        << "replicated " << what << " " << p.name << ": rank " << world.rank()
        << "'s copy differs from rank " << got.copies_differ[0] << "'s";
  }
  expect_covers_fixture(ref, shapes, what + "s on rank " + std::to_string(world.rank()));
  return worst;
}

// The training reference of a fixture (train.json and its batch), if it has one.
struct TrainRef {
  nlohmann::json meta;
  Tensor inputs, targets;  // (B,T) i64
};

std::optional<TrainRef> train_ref(const std::string& dir) {
  std::ifstream jf(dir + "/train.json");
  if (!jf.good()) return std::nullopt;
  TrainRef t{nlohmann::json::parse(jf), ids_tensor(read_id_lines(dir + "/train_inputs.txt")),
             ids_tensor(read_id_lines(dir + "/train_targets.txt"))};
  EXPECT_EQ(t.inputs.shape(),
            (Shape{t.meta["batch"].get<int64_t>(), t.meta["seq"].get<int64_t>()}));
  return t;
}

bool is_k_bias(const std::string& name) {
  return name.find("c_attn.k.bias") != std::string::npos;
}

class ModelMpi : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelMpi, LogitsAndGreedyMatchTransformers) {
  const std::string dir = model_fixture(GetParam());
  const auto prompt = read_numbers<int32_t>(dir + "/tokens.txt");
  const auto greedy = read_numbers<int32_t>(dir + "/greedy.txt");
  const auto ref = read_f32_file(dir + "/logits.bin");
  on_mpi_world([&](Communicator& world) {
    ASSERT_GE(world.size(), 2);
    auto model = load_model(dir, world);
    const int64_t V = model->config().vocab_size;
    std::vector<float> logits;
    perplexity(*model, prompt, int64_t(prompt.size()), [&](int64_t, const Tensor& l) {
      logits = gather_vocab_shards(l, model->vocab_range(), V, world).to_vector();
    });
    EXPECT_LT(max_abs_diff(logits, ref), 1e-4) << "rank " << world.rank();
    std::optional<Tokenizer> tok;
    if (world.rank() == 0) {
      auto f = GgufFile::open(model_fixture("llama_gqa_gguf") + "/model-f16.gguf");
      tok = Tokenizer::from_gguf_vocab(f->metadata().get_string_array("tokenizer.ggml.tokens"), {},
                                       {}, -1, -1, "default");
    }
    auto cache = model->make_cache(64);
    GenerateOptions opt;
    opt.max_tokens = int64_t(greedy.size());
    const auto r = generate(*model, *cache, prompt, opt, tok ? &*tok : nullptr, nullptr);
    EXPECT_EQ(r.tokens, greedy) << "rank " << world.rank();
  });
}

// One forward_backward on the training batch: the loss, and every gradient assembled from its
// shards, against PyTorch's (the GPT-2 k bias's reference gradient is exactly 0: absolute 1e-6).
TEST_P(ModelMpi, LossAndEveryGradientMatchPyTorch) {
  const std::string dir = model_fixture(GetParam());
  const auto t = train_ref(dir);
  if (!t) GTEST_SKIP() << "no training reference for " << GetParam();
  const double ref_loss = t->meta["losses"][0].get<double>();
  auto ref = SafetensorsFile::open(dir + "/grads.safetensors");
  on_mpi_world([&](Communicator& world) {
    auto model = load_model(dir, world);
    model->zero_grad();
    const float loss = model->forward_backward(t->inputs, t->targets, 1.0f);
    EXPECT_NEAR(loss, ref_loss, 1e-4 * ref_loss) << "rank " << world.rank();
    const double worst = compare_parameters(*model, world, *ref, true, [](const std::string& name) {
      return is_k_bias(name) ? 1e-6 : 1e-4;
    });
    if (world.rank() == 0)
      std::printf(
          "  %s np %d: loss %.6f (ref %.6f), worst gradient norm ratio %.3g over %zu tensors\n",
          GetParam().c_str(), world.size(), loss, ref_loss, worst, model->parameters().size());
  });
}

// Three AdamW steps: each step's loss, the loss after them, and every parameter assembled from
// its shards against PyTorch's params_after_3_steps.safetensors.
TEST_P(ModelMpi, ThreeAdamWStepsGivePyTorchLossesAndParameters) {
  const std::string dir = model_fixture(GetParam());
  const auto t = train_ref(dir);
  if (!t) GTEST_SKIP() << "no training reference for " << GetParam();
  const auto& j = t->meta;
  auto ref = SafetensorsFile::open(dir + "/params_after_3_steps.safetensors");
  on_mpi_world([&](Communicator& world) {
    auto model = load_model(dir, world);
    const auto& a = j["adamw"];
    AdamW opt({.lr = a["lr"],
               .beta1 = a["beta1"],
               .beta2 = a["beta2"],
               .eps = a["eps"],
               .weight_decay = a["weight_decay"]});
    for (size_t step = 0; step < j["losses"].size(); ++step) {
      model->zero_grad();
      const float loss = model->forward_backward(t->inputs, t->targets, 1.0f);
      EXPECT_NEAR(loss, double(j["losses"][step]), 1e-4 * double(j["losses"][step]))
          << "step " << step;
      // GPT-2's k bias has an analytically zero gradient that the reference zeroes (fixtures
      // README).
      for (const ParamShard& p : model->parameters())
        if (p.grad && is_k_bias(p.name)) p.grad->fill_zero();
      opt.step(model->parameters(), float(a["lr"]));
    }
    EXPECT_NEAR(model->forward_loss(t->inputs, t->targets), double(j["loss_after_steps"]),
                1e-4 * double(j["loss_after_steps"]));
    const double worst =
        compare_parameters(*model, world, *ref, false, [](const std::string&) { return 1e-4; });
    if (world.rank() == 0)
      std::printf("  %s np %d: worst parameter norm ratio after %zu AdamW steps %.3g\n",
                  GetParam().c_str(), world.size(), j["losses"].size(), worst);
  });
}

// Data parallelism across processes: the world as dp replicas of tp 1 (one rank per process)
// trains a fresh tiny model for 3 steps with the same losses and gradient norms as one
// rank doing every micro-batch (a threads run inside each process), and every replica ends with
// bitwise the same parameters.
TEST(TrainerMpi, DataParallelMatchesOneRank) {
  ModelConfig c = read_model_config(model_fixture("llama_gqa"));
  TokenCorpus corpus;  // the same in every process (a per-process test seed would differ)
  for (uint64_t i = 0; i < 2000; ++i) corpus.train.push_back(int32_t(i * 2654435761u % uint64_t(c.vocab_size)));
  corpus.val = corpus.train;
  on_mpi_world([&](Communicator& world) {
    const int dp = world.size();
    TrainOptions o;
    o.steps = 3;
    o.batch = 2 * dp;
    o.micro_batch = 1;
    o.seq = 16;
    o.lr = 1e-2f;
    std::vector<StepLog> want, got;
    run_model_ranks(1, [&](Communicator& alone) {
      auto m = init_model(c, alone, 5);
      Trainer(*m, corpus, o).run([&](const StepLog& l) { want.push_back(l); });
    });
    DeviceMesh mesh(world, {.tp = 1, .dp = dp});
    auto m = init_model(c, mesh.tp(), 5);
    Trainer(*m, corpus, o, &mesh.dp()).run([&](const StepLog& l) { got.push_back(l); });
    ASSERT_EQ(got.size(), want.size());
    // Step 1 differs only by summation order; later steps also inherit AdamW's sign-sensitive
    // updates of near-zero gradient elements (see Trainer.DataParallelMatchesOneTpGroup).
    for (size_t i = 0; i < got.size(); ++i) {
      const double tol = i == 0 ? 1e-5 : 1e-4;
      EXPECT_NEAR(got[i].loss, want[i].loss, tol * std::fabs(want[i].loss)) << "step " << i + 1;
      EXPECT_NEAR(got[i].grad_norm, want[i].grad_norm, tol * want[i].grad_norm) << "step " << i + 1;
    }
    // Replicas agree bit for bit: rank 0's parameters broadcast and compared on every rank.
    for (const ParamShard& p : m->parameters()) {
      Tensor mine = p.value->clone();
      Tensor root = p.value->clone();
      world.broadcast(root.raw(), root.numel(), DType::kF32, 0);
      EXPECT_EQ(mine.to_vector(), root.to_vector()) << p.name << " on rank " << world.rank();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelMpi,
                         ::testing::Values("llama_gqa", "llama_odd", "qwen2_bias", "gpt2"));

}  // namespace
}  // namespace tensorpar::testing
