// VocabParallelEmbedding and vocab_parallel_cross_entropy at tp 1..4 (uneven vocab shards, an
// empty shard when vocab < tp) against double-precision references and finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/matmul.h"
#include "kernels/quant_test_util.h"
#include "parallel/rng.h"
#include "parallel/vocab_parallel_cross_entropy.h"
#include "parallel/vocab_parallel_embedding.h"
#include "parallel_test_util.h"

namespace tensorpar {
namespace {

using testing::columns;
using testing::ids_tensor;
using testing::max_abs_diff;
using testing::nan_tensor;
using testing::Rng;
using testing::rows_of;
using testing::run_ranks;
using testing::tensor_of;
using PerRank = std::vector<std::vector<float>>;

TEST(VocabParallelEmbedding, MatchesLookupAndScatter) {
  TP_SEED_TRACE();
  for (const int64_t vocab : {13, 3}) {
    const int64_t c_dim = 5;
    Rng rng(static_cast<uint64_t>(vocab));
    const auto table = rng.uniform_vec(size_t(vocab * c_dim));
    std::vector<int64_t> ids = {0, vocab - 1, 1, 0, vocab - 1};  // the edges and repeats
    for (int i = 0; i < 4; ++i) ids.push_back(rng.integer(0, vocab));
    const int64_t n = int64_t(ids.size());
    const auto d_out = rng.uniform_vec(size_t(n * c_dim));
    std::vector<float> ref_out, ref_dw(size_t(vocab * c_dim), 0.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < c_dim; ++c) {
        ref_out.push_back(table[size_t(ids[size_t(i)] * c_dim + c)]);
        ref_dw[size_t(ids[size_t(i)] * c_dim + c)] += d_out[size_t(i * c_dim + c)];
      }
    for (int tp = 1; tp <= 4; ++tp) {
      PerRank outs(static_cast<size_t>(tp)), dws(static_cast<size_t>(tp));
      run_ranks(tp, [&](Communicator& c) {
        VocabParallelEmbedding emb(vocab, c_dim, c.size(), c.rank());
        emb.load(slice_of(tensor_of({vocab, c_dim}, table)));
        Tensor out = nan_tensor({1, n, c_dim});
        emb.forward(out, ids_tensor(ids), c);
        outs[size_t(c.rank())] = out.to_vector();
        emb.backward(tensor_of({n, c_dim}, d_out), ids_tensor(ids));
        dws[size_t(c.rank())] = emb.d_weight().to_vector();
      });
      for (int r = 0; r < tp; ++r) {
        SCOPED_TRACE(::testing::Message() << "V " << vocab << " tp " << tp << " rank " << r);
        EXPECT_EQ(outs[size_t(r)], ref_out);  // one owner plus zeros: exact
        EXPECT_LE(max_abs_diff(dws[size_t(r)], rows_of(ref_dw, c_dim, vocab_range(vocab, tp, r))),
                  1e-6);
      }
    }
  }
}

// A GGUF table row-packed for a tied head (int8_packed.h) looks up the same rows as in its GGUF
// layout, at tp 1..3 (shards of 13, 7/6, 5/4/4 rows: groups of 8 cut short), bit for bit; off
// restores the loaded bytes. (A type this CPU keeps in the GGUF layout stays in it.)
TEST(VocabParallelEmbedding, RowPackedTableLooksUpTheSameRows) {
  Rng rng(31);
  const int64_t vocab = 13;
  for (const DType t : {DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K}) {
    const int64_t c_dim = 2 * dtype_block_elems(t);
    const Tensor table = testing::random_blocks(rng, vocab, c_dim, t);
    const std::vector<int64_t> ids = {0, 12, 7, 8, 3, 12, 1};
    for (int tp = 1; tp <= 3; ++tp)
      run_ranks(tp, [&](Communicator& c) {
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " tp " << tp << " rank " << c.rank());
        VocabParallelEmbedding emb(vocab, c_dim, c.size(), c.rank());
        emb.load(slice_of(table));
        const std::vector<char> loaded = testing::bytes_of(emb.weight());
        Tensor want = nan_tensor({int64_t(ids.size()), c_dim}), got = nan_tensor({int64_t(ids.size()), c_dim});
        emb.forward(want, ids_tensor(ids), c);
        emb.set_row_packed(true);
        EXPECT_EQ(emb.weight().dtype(), int8_packed_rows_preferred(t) ? dtype_row_packed(t) : t);
        emb.forward(got, ids_tensor(ids), c);
        EXPECT_EQ(got.to_vector(), want.to_vector());
        emb.set_row_packed(false);
        EXPECT_EQ(testing::bytes_of(emb.weight()), loaded);
      });
  }
}

// An f32, bf16 or f16 table in panels for a tied head (panel_matmul.h) looks up the same rows, at tp
// 1..3 (shards of 130, 65/65, 44/43/43 rows: a group of 64 cut short), bit for bit; it stays in
// panels whatever the int8 switch, and only where this CPU prefers them.
TEST(VocabParallelEmbedding, PanelTableLooksUpTheSameRows) {
  Rng rng(32);
  const int64_t vocab = 130, c_dim = 24;
  for (const DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tensor table = rng.uniform_tensor({vocab, c_dim}, t);
    const std::vector<int64_t> ids = {0, 129, 63, 64, 65, 44, 43, 87, 1};
    for (int tp = 1; tp <= 3; ++tp)
      run_ranks(tp, [&](Communicator& c) {
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " tp " << tp << " rank " << c.rank());
        VocabParallelEmbedding emb(vocab, c_dim, c.size(), c.rank());
        emb.load(slice_of(table));
        Tensor want = nan_tensor({int64_t(ids.size()), c_dim}), got = nan_tensor({int64_t(ids.size()), c_dim});
        emb.forward(want, ids_tensor(ids), c);
        const DType expected = panels_preferred() ? dtype_panels(t) : t;
        for (const bool on : {true, false}) {
          emb.set_row_packed(on);
          EXPECT_EQ(emb.weight().dtype(), expected);
          emb.forward(got, ids_tensor(ids), c);
          EXPECT_EQ(got.to_vector(), want.to_vector());
        }
      });
  }
}

TEST(VocabParallelEmbedding, BadIdsThrowAndInitIsTpInvariant) {
  std::mutex mu;
  int thrown = 0;
  PerRank w2(2);
  run_ranks(2, [&](Communicator& c) {
    VocabParallelEmbedding emb(7, 3, c.size(), c.rank());
    Tensor out = Tensor::empty({2, 3}, DType::kF32);
    for (const std::vector<int64_t>& bad : {std::vector<int64_t>{0, 7}, {-1, 2}}) {
      try {
        emb.forward(out, ids_tensor(bad), c);
      } catch (const Error&) {
        std::lock_guard<std::mutex> lock(mu);
        ++thrown;
      }
    }
    emb.init_normal(1.0f, 5, 6);
    w2[size_t(c.rank())] = emb.weight().to_vector();
  });
  EXPECT_EQ(thrown, 4);
  VocabParallelEmbedding full(7, 3, 1, 0);
  full.init_normal(1.0f, 5, 6);
  const auto all = full.weight().to_vector();
  EXPECT_EQ(w2[0], rows_of(all, 3, Range{0, 4}));
  EXPECT_EQ(w2[1], rows_of(all, 3, Range{4, 7}));
}

// Double-precision reference: mean over non-ignored rows of
// (1 - eps) * (lse - x_t) + eps / V * sum_j (lse - x_j).
double reference_loss(const std::vector<double>& logits, const std::vector<int64_t>& targets,
                      int64_t vocab, double eps, int64_t ignore, std::vector<double>* per_row) {
  const int64_t n = int64_t(targets.size());
  double total = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double* x = logits.data() + i * vocab;
    double mx = x[0], s = 0, sum_x = 0;
    for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, x[j]);
    for (int64_t j = 0; j < vocab; ++j) {
      s += std::exp(x[j] - mx);
      sum_x += x[j];
    }
    const double lse = mx + std::log(s);
    double loss = 0;
    if (targets[size_t(i)] != ignore) {
      loss = (1 - eps) * (lse - x[targets[size_t(i)]]) + eps * (lse - sum_x / double(vocab));
      total += loss;
      ++count;
    }
    if (per_row) per_row->push_back(loss);
  }
  return count ? total / double(count) : 0.0;
}

TEST(VocabParallelCrossEntropy, MatchesReferenceAndFiniteDifferences) {
  TP_SEED_TRACE();
  for (const int64_t vocab : {13, 3}) {
    for (const float eps : {0.0f, 0.1f}) {
      const int64_t n = 6;
      Rng rng(uint64_t(vocab * 10) + (eps > 0));
      const auto logits = rng.uniform_vec(size_t(n * vocab), -3, 3);
      std::vector<int64_t> targets;
      for (int64_t i = 0; i < n; ++i) targets.push_back(rng.integer(0, vocab));
      targets[2] = -100;            // ignored row
      targets[0] = vocab - 1;       // last column (the last shard)
      CrossEntropyOptions opt;
      opt.label_smoothing = eps;
      const float d_loss = 1.5f;
      // Reference loss, per-row losses and the finite-difference gradient of d_loss * mean.
      std::vector<double> logits_d(logits.begin(), logits.end()), ref_rows;
      const double ref_mean = reference_loss(logits_d, targets, vocab, eps, -100, &ref_rows);
      std::vector<float> fd(logits.size());
      for (size_t i = 0; i < logits.size(); ++i) {
        const double h = 1e-5, x0 = logits_d[i];
        logits_d[i] = x0 + h;
        const double up = reference_loss(logits_d, targets, vocab, eps, -100, nullptr);
        logits_d[i] = x0 - h;
        const double down = reference_loss(logits_d, targets, vocab, eps, -100, nullptr);
        logits_d[i] = x0;
        fd[i] = float(d_loss * (up - down) / (2 * h));
      }
      const std::vector<float> ref_rows_f(ref_rows.begin(), ref_rows.end());
      for (int tp = 1; tp <= 4; ++tp) {
        SCOPED_TRACE(::testing::Message() << "V " << vocab << " eps " << eps << " tp " << tp);
        PerRank losses(static_cast<size_t>(tp)), grads(static_cast<size_t>(tp));
        std::vector<float> means(static_cast<size_t>(tp));
        run_ranks(tp, [&](Communicator& c) {
          const Range mine = vocab_range(vocab, c.size(), c.rank());
          Tensor local = tensor_of({n, mine.size()}, columns(logits, n, vocab, mine));
          Tensor loss_rows = nan_tensor({n}), lse = nan_tensor({n});
          const Tensor tgt = ids_tensor(targets);
          means[size_t(c.rank())] =
              vocab_parallel_cross_entropy_forward(&loss_rows, lse, local, tgt, mine, vocab, c, opt);
          losses[size_t(c.rank())] = loss_rows.to_vector();
          Tensor d_local = Tensor::zeros({n, mine.size()}, DType::kF32);
          vocab_parallel_cross_entropy_backward(d_local, d_loss, local, lse, tgt, mine, vocab, opt);
          grads[size_t(c.rank())] = d_local.to_vector();
        });
        for (int r = 0; r < tp; ++r) {
          SCOPED_TRACE(::testing::Message() << "rank " << r);
          EXPECT_NEAR(means[size_t(r)], ref_mean, 1e-5 * std::max(1.0, std::fabs(ref_mean)));
          EXPECT_EQ(means[size_t(r)], means[0]);
          EXPECT_LE(max_abs_diff(losses[size_t(r)], ref_rows_f), 2e-5);
          const Range mine = vocab_range(vocab, tp, r);
          EXPECT_LE(max_abs_diff(grads[size_t(r)], columns(fd, n, vocab, mine)), 2e-5);
          // The ignored row has no gradient.
          for (int64_t j = 0; j < mine.size(); ++j) EXPECT_EQ(grads[size_t(r)][size_t(2 * mine.size() + j)], 0.0f);
        }
      }
    }
  }
}

TEST(VocabParallelCrossEntropy, BadTargetsThrow) {
  std::mutex mu;
  int thrown = 0;
  run_ranks(2, [&](Communicator& c) {
    const Range mine = vocab_range(5, c.size(), c.rank());
    Tensor local = Tensor::zeros({2, mine.size()}, DType::kF32), lse = Tensor::empty({2}, DType::kF32);
    for (const std::vector<int64_t>& bad : {std::vector<int64_t>{0, 5}, {-3, 1}}) {
      try {
        vocab_parallel_cross_entropy_forward(nullptr, lse, local, ids_tensor(bad), mine, 5, c);
      } catch (const Error&) {
        std::lock_guard<std::mutex> lock(mu);
        ++thrown;
      }
    }
    Tensor wrong = Tensor::zeros({2, 4}, DType::kF32);
    try {
      vocab_parallel_cross_entropy_forward(nullptr, lse, wrong, ids_tensor({0, 1}), mine, 5, c);
    } catch (const Error&) {
      std::lock_guard<std::mutex> lock(mu);
      ++thrown;
    }
  });
  EXPECT_EQ(thrown, 2 + 2 + 2);
}

}  // namespace
}  // namespace tensorpar
