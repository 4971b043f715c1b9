// ParallelMoe: a mixture-of-experts feed-forward block (Mixtral, Qwen2-MoE, Qwen3-MoE) split over
// expert-parallel (EP) and tensor-parallel ranks. A Replicated router (E, C) scores each token,
// softmax then top-k (renormalised when the model says so); each expert is a SwiGLU ParallelMlp
// whose ffn is split over the expert-TP ranks; the experts are spread over the EP ranks by
// partition_even (any E, also when EP does not divide it). Qwen2-MoE adds a shared expert,
// split over the whole reduce group, scaled by sigmoid(x . w_gate).
//
// Two ways the tokens meet the experts (docs/moe.md):
// - dispatch group set (training, EP carved out of data parallelism): each EP rank holds its own
//   tokens; a token's hidden row goes to the rank owning the chosen expert and its output comes
//   back by all_to_all over that group (per-expert row counts exchanged first);
// - no dispatch group (inference, EP inside the TP group as vLLM does): every rank holds all the
//   tokens, so it runs the chosen experts it owns on them and nothing moves.
// Either way each rank ends with a Partial sum (its experts, its ffn slices, its share of the
// shared expert) and one all-reduce over the reduce group (the layer's TP group) completes it,
// as in the dense MLP. Input and output Replicated (N, C) over the reduce group.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/cpu/matmul.h"
#include "parallel/parallel_mlp.h"
#include "parallel/partition.h"

namespace tensorpar {

struct MoeShape {
  int64_t hidden = 0;      // C
  int64_t n_experts = 0;   // E
  int64_t top_k = 0;       // K experts per token
  int64_t expert_ffn = 0;  // each expert's intermediate size
  bool norm_topk = false;  // renormalise the K probabilities to sum to 1
  int64_t shared_ffn = 0;  // shared expert (Qwen2-MoE); 0: none
};

// Where this rank sits: its EP group rank (which experts) and its expert-TP rank (which ffn
// slice of each of them); the shared expert is split over shared_size ranks (the reduce group).
struct ExpertSplit {
  int ep_size = 1, ep_rank = 0;
  int etp_size = 1, etp_rank = 0;
  int shared_size = 1, shared_rank = 0;
};

// Expert parallelism of an MoE model (see ParallelMoe): `size` EP ranks inside the TP group, every
// rank holding the same tokens (inference: each expert's ffn split over tp / size ranks); or
// `dispatch`, an EP group of ranks holding different tokens (data-parallel peers in training;
// experts' ffn split over the whole TP group), tokens moved by all_to_all.
struct ExpertParallel {
  int size = 1;
  Communicator* dispatch = nullptr;
};

// Experts of EP rank r: partition_even(E, ep, r).
std::vector<Range> expert_ranges(int64_t n_experts, int ep_size);

// One forward's intermediates (kept for backward in training, scratch at inference).
struct MoeActs {
  Tensor probs;                 // (N, E) softmax of the router logits
  std::vector<int64_t> chosen;  // (N*K) expert of slot n*K + k, best first
  std::vector<float> weight;    // (N*K) its combine weight
  // The routing of this rank's slots: send_slot[i] = the slot of the i-th row sent (grouped by
  // destination rank, then by expert), send_counts / recv_counts rows per EP rank, and the rows
  // received per (source rank, local expert), source-major.
  std::vector<int64_t> send_slot, send_counts, recv_counts, recv_expert_counts;
  Tensor sent_x, recv_x, expert_x, expert_y, recv_y, slot_y;  // rows (.., C)
  std::vector<MlpActs> expert_acts;                           // per local expert
  std::vector<int64_t> expert_offset;                         // local expert j: rows [off_j, off_{j+1}) of expert_x
  MlpActs shared_acts;
  Tensor shared_y, shared_gate;  // (N, C) Partial, (N) sigmoid
  // Load statistics of this forward: per expert, slots routed to it and the sum of its
  // probability over the N tokens (the auxiliary load-balancing loss reads them).
  std::vector<double> expert_count, prob_sum;
  std::vector<float> lse;  // (N) logsumexp of each token's router logits (the z-loss reads them)
  double lse_sq_sum = 0;   // sum over the tokens of lse^2
  int64_t dropped_slots = 0;  // slots over an expert's capacity (capacity_factor > 0)
  int64_t n_rows = 0;
};

class ParallelMoe {
 public:
  ParallelMoe(const MoeShape& shape, const ExpertSplit& split, int64_t quant_align);

  const MoeShape& shape() const { return shape_; }
  const ExpertSplit& split() const { return split_; }
  Range local_experts() const { return experts_; }
  ParallelMlp& expert(int64_t e);  // e: global index within local_experts()
  const ParallelMlp& expert(int64_t e) const;
  Tensor& router_weight() { return router_w_; }  // (E, C) f32 Replicated
  Tensor& router_grad() { return router_g_; }
  bool has_shared() const { return shared_.has_value(); }
  ParallelMlp& shared() { return *shared_; }
  Tensor& shared_gate_weight() { return shared_gate_w_; }  // (1, C) f32 Replicated
  Tensor& shared_gate_grad() { return shared_gate_g_; }
  int64_t weight_bytes() const;
  void zero_grad();

  // out (N, C) Replicated over `reduce` = the block applied to x (N, C). dispatch: the EP group
  // when tokens differ across it (see above), else null. capacity_factor > 0 (training): each
  // expert takes at most ceil(factor * N * K / E) of the N tokens' slots, the others dropped;
  // 0: dropless. Collective over reduce (and dispatch).
  void forward(MatmulEngine& eng, Tensor& out, const Tensor& x, MoeActs& acts, Communicator& reduce,
               Communicator* dispatch, double capacity_factor = 0) const;
  // forward without the final sum: out (N, C) Partial over `reduce` (each TP rank's expert and
  // shared-expert slices), for a caller that reduce-scatters it (sequence parallelism). Collective
  // over dispatch only.
  void forward_partial(MatmulEngine& eng, Tensor& out, const Tensor& x, MoeActs& acts, Communicator* dispatch,
                       double capacity_factor = 0) const;
  // d_x (N, C) written: the input gradient of d_out (N, C). aux_dprob (E, may be empty): a
  // gradient added to every token's router probability of expert e (the auxiliary loss's);
  // z_dlse: the router z-loss's gradient on a token's logsumexp per unit of it (d loss / d lse_n
  // = z_dlse * lse_n; 0: none). Weight gradients accumulate. With `async` (a CommThread over
  // reduce) the sum of d_x runs while the shared expert's first-layer weight gradient and the
  // router's and shared gate's gradients are computed (bitwise the in-line result).
  void backward(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x, const MoeActs& acts,
                std::span<const float> aux_dprob, float z_dlse, Communicator& reduce, Communicator* dispatch,
                CommThread* async = nullptr);
  // backward with d_x Partial over `reduce` (its sum over the ranks is backward's d_x; the
  // router's and the shared gate's input gradients, the same on every rank, are in rank 0's
  // part), for a caller that reduce-scatters it. Still collective over reduce (the combine
  // weights' gradients are summed) and dispatch.
  void backward_partial(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x, const MoeActs& acts,
                        std::span<const float> aux_dprob, float z_dlse, Communicator& reduce, Communicator* dispatch);

 private:
  // Moves rows (rows, C) between EP ranks: forward from the senders' order to the receivers'
  // (source-major), or back. Without a dispatch group the rows stay (a copy).
  void exchange(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_rows,
                const std::vector<int64_t>& recv_rows, Communicator* dispatch) const;
  // Received rows (source-major) to expert-major order and back.
  void to_expert_order(Tensor& out, const Tensor& in, const MoeActs& a, bool back) const;
  // backward (sum_dx) or backward_partial.
  void backward_impl(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x, const MoeActs& acts,
                     std::span<const float> aux_dprob, float z_dlse, Communicator& reduce, Communicator* dispatch,
                     bool sum_dx, CommThread* async);

  MoeShape shape_;
  ExpertSplit split_;
  std::vector<Range> expert_ranges_;  // per EP rank
  Range experts_;
  std::vector<ParallelMlp> experts_mlp_;
  Tensor router_w_, router_g_;
  std::optional<ParallelMlp> shared_;
  Tensor shared_gate_w_, shared_gate_g_;
};

// Naive reference (tests): the whole MoE block on one rank, plain loops in double, from full
// weights: router (E, C), per expert gate (F, C), up (F, C), down (C, F), shared ones or empty.
void moe_forward_naive(Tensor& out, const Tensor& x, const MoeShape& shape, const Tensor& router,
                       const std::vector<Tensor>& gate, const std::vector<Tensor>& up, const std::vector<Tensor>& down,
                       const Tensor* shared_gate, const Tensor* shared_up, const Tensor* shared_down,
                       const Tensor* shared_gate_w);

}  // namespace tensorpar
