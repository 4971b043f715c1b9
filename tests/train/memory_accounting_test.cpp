// The parameter count and training-state bytes against counts written out from the Llama
// architecture by hand (embedding, per-layer q/k/v/o + gate/up/down + two norms, final norm), at
// tp 1, at tp 2 (every projection split) and at tp 4 > kv heads (k/v replicated in pairs).
#include "train/memory_accounting.h"

#include <gtest/gtest.h>

#include <mutex>

#include "model/load_model.h"
#include "plan/cluster.h"
#include "plan/train_cost.h"
#include "train/train_test_util.h"

namespace tensorpar::testing {
namespace {

struct LlamaCounts {
  int64_t total = 0;       // parameters of the model
  int64_t replicated = 0;  // held whole by every rank (the norms)
  int64_t kv = 0;          // k_proj + v_proj weights of all layers
};

LlamaCounts count_by_hand(const ModelConfig& c) {
  const int64_t C = c.hidden, HS = c.head_dim, F = c.ffn, L = c.n_layers;
  const int64_t q = C * c.n_heads * HS, kv = 2 * C * c.n_kv_heads * HS, o = c.n_heads * HS * C;
  const int64_t mlp = 3 * C * F, norms = 2 * C;
  LlamaCounts n;
  n.replicated = L * norms + C;
  n.kv = L * kv;
  n.total = c.vocab_size * C * (c.tie_embeddings ? 1 : 2) + L * (q + kv + o + mlp + norms) + C;
  return n;
}

// Sum over the TP group of training_state_bytes, and the parameter count each rank reports.
void measure(const ModelConfig& c, int tp, int64_t& bytes_sum, int64_t& count) {
  std::mutex m;
  bytes_sum = 0;
  run_model_ranks(tp, [&](Communicator& comm) {
    auto model = init_model(c, comm, 1);
    const TrainMemoryReport r = train_memory_report(model->parameters(), comm);
    std::lock_guard<std::mutex> lock(m);
    if (comm.rank() == 0)
      for (int64_t b : r.state_bytes_per_rank) bytes_sum += b;
    count = r.parameters;
    EXPECT_EQ(r.state_bytes_per_rank[size_t(comm.rank())],
              training_state_bytes(model->parameters()));
  });
}

TEST(MemoryAccounting, ParameterCountAndStateBytesMatchTheArchitecture) {
  for (bool tied : {true, false}) {
    ModelConfig c = tiny_llama();  // 6 heads, 2 kv heads
    c.tie_embeddings = tied;
    const LlamaCounts n = count_by_hand(c);
    const int64_t per_element = 4 * int64_t(sizeof(float));  // value, grad, two AdamW moments
    int64_t bytes = 0, count = 0;
    measure(c, 1, bytes, count);
    EXPECT_EQ(count, n.total);
    EXPECT_EQ(bytes, n.total * per_element);
    // The distributed optimizer over 3 DP ranks: value and gradient whole, moments a third
    // (rounded up).
    run_model_ranks(1, [&](Communicator& comm) {
      auto model = init_model(c, comm, 1);
      EXPECT_EQ(training_state_bytes(model->parameters(), 3),
                2 * n.total * int64_t(sizeof(float)) + (2 * n.total * int64_t(sizeof(float)) + 2) / 3);
    });
    // tp 2: every rank holds the norms whole, everything else is split.
    measure(c, 2, bytes, count);
    EXPECT_EQ(count, n.total);
    EXPECT_EQ(bytes, (n.total + n.replicated) * per_element);
    // tp 4 over 2 kv heads: each kv head lives on 2 ranks, so k/v count twice in the sum.
    measure(c, 4, bytes, count);
    EXPECT_EQ(count, n.total);
    EXPECT_EQ(bytes, (n.total + 3 * n.replicated + n.kv) * per_element);
  }
}

}  // namespace
}  // namespace tensorpar::testing

namespace tensorpar::testing {
namespace {

// The planner's activation model for tensorpar (plan/train_cost.h with eff.tensorpar_buffers)
// against the activations a training step really keeps (CausalLM::activation_bytes of the
// fullest rank: the planner sizes shards by the largest), at tp 1, 2 and 4 (kv heads replicated),
// with sequence parallelism and with full recomputation: within 5%. (Uneven splits are sized by
// ceil(size / tp) per rank; at tp 3 with 4 heads and ffn 256 that is 7% above the fullest rank.)
TEST(MemoryAccounting, ActivationsMatchThePlannersModel) {
  ModelConfig c = tiny_llama(512);
  c.hidden = 128, c.n_layers = 4, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 32, c.ffn = 256;
  c.max_position = 128;
  const int64_t B = 2, T = 128;
  plan::ModelSpec m;
  m.name = "tiny";
  m.layers = c.n_layers, m.hidden = c.hidden, m.heads = c.n_heads, m.kv_heads = c.n_kv_heads;
  m.head_dim = c.head_dim, m.ffn = c.ffn, m.vocab = c.vocab_size, m.tied_embeddings = c.tie_embeddings;
  struct Case {
    int tp;
    bool sp;
    bool recompute;
  };
  for (const Case k : {Case{1, false, false}, Case{2, false, false}, Case{2, true, false}, Case{4, true, false},
                       Case{2, false, true}, Case{2, true, true}}) {
    int64_t measured = 0;
    std::mutex mu;
    run_model_ranks(k.tp, [&](Communicator& comm) {
      auto model = init_model(c, comm, 1);
      TrainCompute compute;
      compute.sequence_parallel = k.sp;
      compute.recompute_layers = k.recompute ? c.n_layers : 0;
      model->set_train_compute(compute);
      Tensor tokens = Tensor::empty({B, T}, DType::kI64), targets = Tensor::empty({B, T}, DType::kI64);
      for (int64_t i = 0; i < B * T; ++i) {
        tokens.data<int64_t>()[i] = (i * 7) % c.vocab_size;
        targets.data<int64_t>()[i] = (i * 11 + 3) % c.vocab_size;
      }
      model->forward_backward(tokens, targets, 1.0f);
      std::lock_guard<std::mutex> lock(mu);
      measured = std::max(measured, model->activation_bytes());
    });
    plan::ClusterSpec cluster = plan::cluster_preset("this-machine");
    ASSERT_TRUE(cluster.eff.tensorpar_buffers);
    cluster.devices_per_node = k.tp;
    plan::TrainWorkload w;
    w.global_batch = B, w.seq = T;
    w.weight_bytes = 4, w.grad_bytes = 4, w.optimizer_bytes = 8, w.activation_bytes = 4;
    plan::TrainPlan p;
    p.tp = k.tp, p.sp = k.sp, p.micro_batch = int(B);
    p.recompute = k.recompute ? plan::Recompute::kFull : plan::Recompute::kNone;
    const double predicted = plan::estimate_train(m, cluster, w, p).memory.activations;
    EXPECT_NEAR(predicted / double(measured), 1.0, 0.05)
        << "tp " << k.tp << (k.sp ? " sp" : "") << (k.recompute ? " recompute" : "") << ": measured " << measured
        << " bytes, the planner " << predicted;
  }
}

}  // namespace
}  // namespace tensorpar::testing
