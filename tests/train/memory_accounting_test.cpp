// The parameter count and training-state bytes against counts written out from the Llama
// architecture by hand (embedding, per-layer q/k/v/o + gate/up/down + two norms, final norm), at
// tp 1, at tp 2 (every projection split) and at tp 4 > kv heads (k/v replicated in pairs).
#include "train/memory_accounting.h"

#include <gtest/gtest.h>

#include <mutex>

#include "model/load_model.h"
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
