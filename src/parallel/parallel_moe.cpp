// ParallelMoe (see parallel_moe.h).
#include "parallel/parallel_moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "parallel/slice_loader.h"

namespace tensorpar {

namespace {

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

float dot(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Softmax of each row of p (N, E) in place; lse (N) = each row's logsumexp.
void softmax_rows(float* p, float* lse, int64_t N, int64_t E) {
  for (int64_t n = 0; n < N; ++n) {
    float* r = p + n * E;
    const float mx = *std::max_element(r, r + E);
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (r[e] = std::exp(r[e] - mx));
    for (int64_t e = 0; e < E; ++e) r[e] /= sum;
    lse[n] = mx + std::log(sum);
  }
}

// The K largest of row p (E), best first; ties to the lower index.
void top_k(const float* p, int64_t E, int64_t K, int64_t* out, std::vector<int64_t>& order) {
  order.resize(size_t(E));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::partial_sort(order.begin(), order.begin() + K, order.end(),
                    [p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  std::copy(order.begin(), order.begin() + K, out);
}

}  // namespace

std::vector<Range> expert_ranges(int64_t n_experts, int ep_size) { return partition_even_all(n_experts, ep_size); }

ParallelMoe::ParallelMoe(const MoeShape& shape, const ExpertSplit& split, int64_t quant_align)
    : shape_(shape), split_(split), expert_ranges_(expert_ranges(shape.n_experts, split.ep_size)) {
  TP_CHECK(shape.n_experts >= 1 && shape.top_k >= 1 && shape.top_k <= shape.n_experts && shape.expert_ffn >= 1,
           "[ParallelMoe] ", shape.n_experts, " experts, top ", shape.top_k, ", expert ffn ", shape.expert_ffn,
           ": expected 1 <= top_k <= experts and ffn >= 1");
  TP_CHECK(split.ep_rank >= 0 && split.ep_rank < split.ep_size && split.etp_rank >= 0 &&
               split.etp_rank < split.etp_size && split.shared_rank >= 0 && split.shared_rank < split.shared_size,
           "[ParallelMoe] ep rank ", split.ep_rank, " of ", split.ep_size, ", expert-tp rank ", split.etp_rank, " of ",
           split.etp_size, ": out of range");
  experts_ = expert_ranges_[size_t(split.ep_rank)];
  const std::vector<Range> ffn = mlp_ffn_ranges(shape.expert_ffn, split.etp_size, quant_align);
  experts_mlp_.reserve(size_t(experts_.size()));
  for (int64_t e = experts_.begin; e < experts_.end; ++e)
    experts_mlp_.emplace_back(shape.hidden, shape.expert_ffn, MlpKind::kSwiGlu, false, ffn, split.etp_rank);
  router_w_ = Tensor::zeros({shape.n_experts, shape.hidden}, DType::kF32);
  if (shape.shared_ffn > 0) {
    shared_.emplace(shape.hidden, shape.shared_ffn, MlpKind::kSwiGlu, false,
                    mlp_ffn_ranges(shape.shared_ffn, split.shared_size, quant_align), split.shared_rank);
    shared_gate_w_ = Tensor::zeros({1, shape.hidden}, DType::kF32);
  }
}

ParallelMlp& ParallelMoe::expert(int64_t e) {
  TP_CHECK(experts_.contains(e), "[ParallelMoe] expert ", e, " is not held by ep rank ", split_.ep_rank,
           " (it holds ", range_str(experts_), ")");
  return experts_mlp_[size_t(e - experts_.begin)];
}

const ParallelMlp& ParallelMoe::expert(int64_t e) const { return const_cast<ParallelMoe*>(this)->expert(e); }

int64_t ParallelMoe::weight_bytes() const {
  int64_t n = router_w_.nbytes();
  for (const ParallelMlp& m : experts_mlp_) n += m.weight_bytes();
  if (shared_) n += shared_->weight_bytes() + shared_gate_w_.nbytes();
  return n;
}

void ParallelMoe::zero_grad() {
  for (ParallelMlp& m : experts_mlp_) m.zero_grad();
  if (shared_) shared_->zero_grad();
  for (Tensor* g : {&router_g_, &shared_gate_g_})
    if (g->ndim() > 0 && g->numel() > 0 && g->raw()) g->fill_zero();
}

void ParallelMoe::exchange(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_rows,
                           const std::vector<int64_t>& recv_rows, Communicator* dispatch) const {
  const int64_t C = shape_.hidden;
  if (!dispatch) {
    if (in.numel() > 0) std::memcpy(out.raw(), in.raw(), size_t(in.nbytes()));
    return;
  }
  std::vector<int64_t> sc(send_rows.size()), rc(recv_rows.size());
  for (size_t r = 0; r < sc.size(); ++r) sc[r] = send_rows[r] * C;
  for (size_t r = 0; r < rc.size(); ++r) rc[r] = recv_rows[r] * C;
  dispatch->all_to_all(in.raw(), sc, out.raw(), rc, DType::kF32);
}

void ParallelMoe::to_expert_order(Tensor& out, const Tensor& in, const MoeActs& a, bool back) const {
  const int64_t C = shape_.hidden, El = experts_.size();
  const int64_t sources = int64_t(a.recv_counts.size());
  // Row offset of (source s, local expert j) in the source-major order.
  std::vector<int64_t> src_off(size_t(sources * El));
  int64_t o = 0;
  for (int64_t s = 0; s < sources; ++s)
    for (int64_t j = 0; j < El; ++j) src_off[size_t(s * El + j)] = o, o += a.recv_expert_counts[size_t(s * El + j)];
  int64_t e_off = 0;
  for (int64_t j = 0; j < El; ++j)
    for (int64_t s = 0; s < sources; ++s) {
      const int64_t rows = a.recv_expert_counts[size_t(s * El + j)];
      const float* from = (back ? in.data<float>() + e_off * C : in.data<float>() + src_off[size_t(s * El + j)] * C);
      float* to = back ? out.data<float>() + src_off[size_t(s * El + j)] * C : out.data<float>() + e_off * C;
      if (rows > 0) std::memcpy(to, from, size_t(rows * C) * sizeof(float));
      e_off += rows;
    }
}

void ParallelMoe::forward(MatmulEngine& eng, Tensor& out, const Tensor& x, MoeActs& a, Communicator& reduce,
                          Communicator* dispatch, double capacity_factor) const {
  forward_partial(eng, out, x, a, dispatch, capacity_factor);
  reduce.all_reduce(out);
}

void ParallelMoe::forward_partial(MatmulEngine& eng, Tensor& out, const Tensor& x, MoeActs& a, Communicator* dispatch,
                                  double capacity_factor) const {
  TP_CHECK(x.ndim() == 2 && x.dim(1) == shape_.hidden && out.shape() == x.shape() && out.raw() != x.raw(),
           "[ParallelMoe::forward] x ", x.describe(), ", out ", out.describe(),
           ": expected two distinct (N, ", shape_.hidden, ") tensors");
  TP_CHECK(!dispatch || (dispatch->size() == split_.ep_size && dispatch->rank() == split_.ep_rank),
           "[ParallelMoe::forward] dispatch group ", dispatch ? dispatch->name() : "", " of ",
           dispatch ? dispatch->size() : 0, " ranks does not match ep ", split_.ep_size);
  const int64_t N = x.dim(0), C = shape_.hidden, E = shape_.n_experts, K = shape_.top_k, El = experts_.size();
  const int ep = split_.ep_size;
  a.n_rows = N;
  // Router: probabilities, the top K of each token and their combine weights.
  Tensor probs = scratch_rows(a.probs, N, E);
  if (N > 0) matmul_forward(eng, probs, x, router_w_, nullptr);
  a.lse.resize(size_t(N));
  softmax_rows(probs.data<float>(), a.lse.data(), N, E);
  a.lse_sq_sum = 0;
  for (int64_t n = 0; n < N; ++n) a.lse_sq_sum += double(a.lse[size_t(n)]) * a.lse[size_t(n)];
  a.chosen.resize(size_t(N * K));
  a.weight.resize(size_t(N * K));
  a.expert_count.assign(size_t(E), 0.0);
  a.prob_sum.assign(size_t(E), 0.0);
  std::vector<int64_t> order;
  for (int64_t n = 0; n < N; ++n) {
    const float* p = probs.data<float>() + n * E;
    int64_t* ch = a.chosen.data() + n * K;
    top_k(p, E, K, ch, order);
    float sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += p[ch[k]];
    for (int64_t k = 0; k < K; ++k) {
      a.weight[size_t(n * K + k)] = shape_.norm_topk ? p[ch[k]] / sum : p[ch[k]];
      a.expert_count[size_t(ch[k])] += 1;
    }
    for (int64_t e = 0; e < E; ++e) a.prob_sum[size_t(e)] += p[e];
  }
  // With a capacity factor an expert takes at most ceil(factor * N * K / E) of this forward's
  // slots, first choices before second ones, earlier tokens first (Switch / GShard); the rest are
  // dropped (their tokens keep the residual and their other experts).
  std::vector<char> keep(size_t(N * K), 1);
  a.dropped_slots = 0;
  if (capacity_factor > 0) {
    const int64_t cap = int64_t(std::ceil(capacity_factor * double(N * K) / double(E)));
    std::vector<int64_t> taken(size_t(E), 0);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t s = n * K + k;
        if (taken[size_t(a.chosen[size_t(s)])]++ >= cap) keep[size_t(s)] = 0, ++a.dropped_slots;
      }
  }
  // This rank's slots, sorted by expert (so grouped by owner rank, as the expert ranges are
  // contiguous in rank order); without a dispatch group only the experts held here.
  auto sent = [&](int64_t s) { return keep[size_t(s)] && (dispatch || experts_.contains(a.chosen[size_t(s)])); };
  std::vector<int64_t> per_expert(size_t(E), 0);
  a.send_slot.clear();
  for (int64_t s = 0; s < N * K; ++s)
    if (sent(s)) ++per_expert[size_t(a.chosen[size_t(s)])];
  std::vector<int64_t> start(size_t(E) + 1, 0);
  for (int64_t e = 0; e < E; ++e) start[size_t(e) + 1] = start[size_t(e)] + per_expert[size_t(e)];
  a.send_slot.resize(size_t(start[size_t(E)]));
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t s = 0; s < N * K; ++s) {
      if (sent(s)) a.send_slot[size_t(fill[size_t(a.chosen[size_t(s)])]++)] = s;
    }
  }
  const int64_t S = int64_t(a.send_slot.size());
  // Counts: rows per destination, and per (source, local expert) received.
  if (dispatch) {
    a.send_counts.assign(size_t(ep), 0);
    for (int r = 0; r < ep; ++r)
      for (int64_t e = expert_ranges_[size_t(r)].begin; e < expert_ranges_[size_t(r)].end; ++e)
        a.send_counts[size_t(r)] += per_expert[size_t(e)];
    std::vector<int64_t> sc(static_cast<size_t>(ep)), rc(static_cast<size_t>(ep), El);
    for (int r = 0; r < ep; ++r) sc[size_t(r)] = expert_ranges_[size_t(r)].size();
    a.recv_expert_counts.assign(size_t(ep * El), 0);
    dispatch->all_to_all(per_expert.data(), sc, a.recv_expert_counts.data(), rc, DType::kI64);
    a.recv_counts.assign(size_t(ep), 0);
    for (int r = 0; r < ep; ++r)
      for (int64_t j = 0; j < El; ++j) a.recv_counts[size_t(r)] += a.recv_expert_counts[size_t(r * El + j)];
  } else {
    a.send_counts = {S};
    a.recv_counts = {S};
    a.recv_expert_counts.assign(per_expert.begin() + experts_.begin, per_expert.begin() + experts_.end);
  }
  const int64_t R = std::accumulate(a.recv_counts.begin(), a.recv_counts.end(), int64_t(0));
  Tensor sent_x = scratch_rows(a.sent_x, S, C), recv_x = scratch_rows(a.recv_x, R, C);
  for (int64_t i = 0; i < S; ++i)
    std::memcpy(sent_x.data<float>() + i * C, x.data<float>() + (a.send_slot[size_t(i)] / K) * C,
                size_t(C) * sizeof(float));
  exchange(recv_x, sent_x, a.send_counts, a.recv_counts, dispatch);
  // Each local expert on its rows.
  Tensor xe = scratch_rows(a.expert_x, R, C), ye = scratch_rows(a.expert_y, R, C);
  to_expert_order(xe, recv_x, a, false);
  a.expert_acts.resize(size_t(El));
  a.expert_offset.assign(size_t(El) + 1, 0);
  for (int64_t j = 0; j < El; ++j) {
    int64_t rows = 0;
    for (size_t s = 0; s < a.recv_counts.size(); ++s) rows += a.recv_expert_counts[s * size_t(El) + size_t(j)];
    a.expert_offset[size_t(j) + 1] = a.expert_offset[size_t(j)] + rows;
    if (rows == 0) continue;
    const int64_t o = a.expert_offset[size_t(j)];
    Tensor yj = ye.slice(0, o, o + rows);
    experts_mlp_[size_t(j)].forward_partial(eng, yj, xe.slice(0, o, o + rows), a.expert_acts[size_t(j)]);
  }
  Tensor recv_y = scratch_rows(a.recv_y, R, C), slot_y = scratch_rows(a.slot_y, S, C);
  to_expert_order(recv_y, ye, a, true);
  exchange(slot_y, recv_y, a.recv_counts, a.send_counts, dispatch);
  // Combine: out[n] = sum over the token's slots (in expert order) of weight * expert output.
  out.fill_zero();
  float* o = out.data<float>();
  for (int64_t i = 0; i < S; ++i) {
    const int64_t slot = a.send_slot[size_t(i)];
    const float w = a.weight[size_t(slot)];
    const float* y = slot_y.data<float>() + i * C;
    float* on = o + (slot / K) * C;
    for (int64_t c = 0; c < C; ++c) on[c] += w * y[c];
  }
  if (shared_) {
    Tensor sy = scratch_rows(a.shared_y, N, C), g = scratch_rows(a.shared_gate, N, 1);
    shared_->forward_partial(eng, sy, x, a.shared_acts);
    for (int64_t n = 0; n < N; ++n) {
      const float gn = sigmoid(dot(x.data<float>() + n * C, shared_gate_w_.data<float>(), C));
      g.data<float>()[n] = gn;
      const float* y = sy.data<float>() + n * C;
      for (int64_t c = 0; c < C; ++c) o[n * C + c] += gn * y[c];
    }
  }
}

void ParallelMoe::backward(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x, const MoeActs& a,
                           std::span<const float> aux_dprob, float z_dlse, Communicator& reduce,
                           Communicator* dispatch, CommThread* async) {
  backward_impl(eng, d_x, d_out, x, a, aux_dprob, z_dlse, reduce, dispatch, true, async);
}

void ParallelMoe::backward_partial(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x,
                                   const MoeActs& a, std::span<const float> aux_dprob, float z_dlse,
                                   Communicator& reduce, Communicator* dispatch) {
  backward_impl(eng, d_x, d_out, x, a, aux_dprob, z_dlse, reduce, dispatch, false, nullptr);
}

void ParallelMoe::backward_impl(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x,
                                const MoeActs& a, std::span<const float> aux_dprob, float z_dlse,
                                Communicator& reduce, Communicator* dispatch, bool sum_dx, CommThread* async) {
  const int64_t N = x.dim(0), C = shape_.hidden, E = shape_.n_experts, K = shape_.top_k, El = experts_.size();
  TP_CHECK(a.n_rows == N && d_out.shape() == x.shape() && d_x.shape() == x.shape() && d_x.raw() != d_out.raw(),
           "[ParallelMoe::backward] d_out ", d_out.describe(), ", d_x ", d_x.describe(), ", x ", x.describe(),
           ": expected distinct (N, C) tensors and the forward's activations of ", a.n_rows, " rows");
  TP_CHECK(aux_dprob.empty() || int64_t(aux_dprob.size()) == E, "[ParallelMoe::backward] aux gradient of ",
           aux_dprob.size(), " experts, expected ", E);
  const bool overlap = sum_dx && async != nullptr && reduce.size() > 1;
  TP_CHECK(!overlap || (async->size() == reduce.size() && async->rank() == reduce.rank()),
           "[ParallelMoe::backward] async: a ", overlap ? async->size() : 0, "-rank CommThread for the ",
           reduce.size(), "-rank ", reduce.name(), " group (rank ", reduce.rank(), ")");
  const int64_t S = int64_t(a.send_slot.size()), R = a.expert_offset.back();
  const float* dout = d_out.data<float>();
  // Gradients of the combine weights and of the shared gate, Partial until summed.
  std::vector<float> small(size_t(N * K + N), 0.0f);
  for (int64_t i = 0; i < S; ++i) {
    const int64_t slot = a.send_slot[size_t(i)];
    small[size_t(slot)] = dot(dout + (slot / K) * C, a.slot_y.data<float>() + i * C, C);
  }
  if (shared_)
    for (int64_t n = 0; n < N; ++n) small[size_t(N * K + n)] = dot(dout + n * C, a.shared_y.data<float>() + n * C, C);
  reduce.all_reduce(std::span<float>(small));
  // Through the experts: each slot's output gradient to its expert and the input gradient back.
  Tensor d_slot = Tensor::empty({S, C}, DType::kF32), d_recv = Tensor::empty({R, C}, DType::kF32);
  for (int64_t i = 0; i < S; ++i) {
    const int64_t slot = a.send_slot[size_t(i)];
    const float w = a.weight[size_t(slot)];
    const float* g = dout + (slot / K) * C;
    float* d = d_slot.data<float>() + i * C;
    for (int64_t c = 0; c < C; ++c) d[c] = w * g[c];
  }
  exchange(d_recv, d_slot, a.send_counts, a.recv_counts, dispatch);
  Tensor d_ye = Tensor::empty({R, C}, DType::kF32), d_xe = Tensor::zeros({R, C}, DType::kF32);
  to_expert_order(d_ye, d_recv, a, false);
  for (int64_t j = 0; j < El; ++j) {
    const int64_t o = a.expert_offset[size_t(j)], rows = a.expert_offset[size_t(j) + 1] - o;
    if (rows == 0) {
      experts_mlp_[size_t(j)].allocate_grads();
      continue;
    }
    Tensor dxj = d_xe.slice(0, o, o + rows);
    experts_mlp_[size_t(j)].backward_partial(eng, dxj, d_ye.slice(0, o, o + rows), a.expert_x.slice(0, o, o + rows),
                                             a.expert_acts[size_t(j)]);
  }
  to_expert_order(d_recv, d_xe, a, true);
  exchange(d_slot, d_recv, a.recv_counts, a.send_counts, dispatch);
  d_x.fill_zero();
  float* dx = d_x.data<float>();
  for (int64_t i = 0; i < S; ++i) {
    const float* d = d_slot.data<float>() + i * C;
    float* dn = dx + (a.send_slot[size_t(i)] / K) * C;
    for (int64_t c = 0; c < C; ++c) dn[c] += d[c];
  }
  // The sum of d_x: on the CommThread from the moment d_x is complete (before the shared expert's
  // first-layer weight gradient), or in line. Nothing writes d_x until it is finished: the
  // replicated parts' input gradients go to d_rep, added after.
  std::optional<QueuedOp> sum;
  if (overlap) sum.emplace(*async, [&d_x](Communicator& c) { c.all_reduce(d_x); });
  if (shared_) {
    Tensor d_sy = Tensor::empty({N, C}, DType::kF32);
    for (int64_t n = 0; n < N; ++n) {
      const float g = a.shared_gate.data<float>()[n];
      for (int64_t c = 0; c < C; ++c) d_sy.data<float>()[n * C + c] = g * dout[n * C + c];
    }
    shared_->backward_partial(eng, d_x, d_sy, x, a.shared_acts,
                              overlap ? std::function<void()>([&sum] { sum->start(); }) : std::function<void()>());
  }
  if (overlap && !sum->started()) sum->start();
  if (sum_dx && !overlap) reduce.all_reduce(d_x);
  // The replicated parts' input gradients, the same on every rank: added to the sum, or to rank
  // 0's part only when d_x stays Partial.
  const bool adds_replicated = sum_dx || reduce.rank() == 0;
  Tensor d_rep = adds_replicated ? Tensor::zeros({N, C}, DType::kF32) : Tensor();
  float* drep = adds_replicated ? d_rep.data<float>() : nullptr;
  // The router and the shared gate (Replicated: every rank computes the same, after the sum).
  Tensor d_logits = Tensor::zeros({N, E}, DType::kF32);
  for (int64_t n = 0; n < N; ++n) {
    const float* p = a.probs.data<float>() + n * E;
    float* dl = d_logits.data<float>() + n * E;  // first d(prob), then d(logit)
    const int64_t* ch = a.chosen.data() + n * K;
    const float* dw = small.data() + n * K;
    if (shape_.norm_topk) {  // w_k = p_k / s, s = sum of the K: dp_k = (dw_k - sum_j dw_j w_j) / s
      float s = 0, dot_w = 0;
      for (int64_t k = 0; k < K; ++k) s += p[ch[k]], dot_w += dw[k] * a.weight[size_t(n * K + k)];
      for (int64_t k = 0; k < K; ++k) dl[ch[k]] += (dw[k] - dot_w) / s;
    } else {
      for (int64_t k = 0; k < K; ++k) dl[ch[k]] += dw[k];
    }
    if (!aux_dprob.empty())
      for (int64_t e = 0; e < E; ++e) dl[e] += aux_dprob[size_t(e)];
    float pd = 0;
    for (int64_t e = 0; e < E; ++e) pd += p[e] * dl[e];
    // d logit = softmax backward, + the z-loss's: d lse / d logit_e = p_e.
    const float dz = z_dlse * a.lse[size_t(n)];
    for (int64_t e = 0; e < E; ++e) dl[e] = p[e] * (dl[e] - pd + dz);
  }
  ensure_grad(router_g_, router_w_.shape());
  if (N > 0) matmul_backward(eng, adds_replicated ? &d_rep : nullptr, &router_g_, nullptr, d_logits, x, router_w_);
  if (shared_) {
    ensure_grad(shared_gate_g_, shared_gate_w_.shape());
    float* gg = shared_gate_g_.data<float>();
    const float* gw = shared_gate_w_.data<float>();
    for (int64_t n = 0; n < N; ++n) {
      const float g = a.shared_gate.data<float>()[n];
      const float dz = small[size_t(N * K + n)] * g * (1.0f - g);
      const float* xn = x.data<float>() + n * C;
      for (int64_t c = 0; c < C; ++c) gg[c] += dz * xn[c];
      if (adds_replicated)
        for (int64_t c = 0; c < C; ++c) drep[n * C + c] += dz * gw[c];
    }
  }
  if (overlap) sum->finish();
  if (adds_replicated)
    for (int64_t i = 0; i < N * C; ++i) dx[i] += drep[i];
}

void moe_forward_naive(Tensor& out, const Tensor& x, const MoeShape& shape, const Tensor& router,
                       const std::vector<Tensor>& gate, const std::vector<Tensor>& up, const std::vector<Tensor>& down,
                       const Tensor* shared_gate, const Tensor* shared_up, const Tensor* shared_down,
                       const Tensor* shared_gate_w) {
  const int64_t N = x.dim(0), C = shape.hidden, E = shape.n_experts, K = shape.top_k;
  const Tensor xf = x.to(DType::kF32), rf = router.to(DType::kF32);
  auto mlp = [&](const Tensor& g, const Tensor& u, const Tensor& d, const float* xn, std::vector<double>& y) {
    const int64_t F = g.dim(0);
    const Tensor gf = g.to(DType::kF32), uf = u.to(DType::kF32), df = d.to(DType::kF32);
    std::vector<double> h(static_cast<size_t>(F));
    for (int64_t f = 0; f < F; ++f) {
      double a = 0, b = 0;
      for (int64_t c = 0; c < C; ++c) a += double(gf.data<float>()[f * C + c]) * xn[c], b += double(uf.data<float>()[f * C + c]) * xn[c];
      h[size_t(f)] = a / (1.0 + std::exp(-a)) * b;
    }
    y.assign(size_t(C), 0.0);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t f = 0; f < F; ++f) y[size_t(c)] += double(df.data<float>()[c * F + f]) * h[size_t(f)];
  };
  out = Tensor::zeros({N, C}, DType::kF32);
  std::vector<double> p(static_cast<size_t>(E)), y, acc(static_cast<size_t>(C));
  for (int64_t n = 0; n < N; ++n) {
    const float* xn = xf.data<float>() + n * C;
    double mx = -1e300;
    for (int64_t e = 0; e < E; ++e) {
      double l = 0;
      for (int64_t c = 0; c < C; ++c) l += double(rf.data<float>()[e * C + c]) * xn[c];
      p[size_t(e)] = l, mx = std::max(mx, l);
    }
    double sum = 0;
    for (double& v : p) sum += (v = std::exp(v - mx));
    for (double& v : p) v /= sum;
    std::vector<int64_t> idx(static_cast<size_t>(E));
    std::iota(idx.begin(), idx.end(), int64_t(0));
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
    double top = 0;
    for (int64_t k = 0; k < K; ++k) top += p[size_t(idx[size_t(k)])];
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = idx[size_t(k)];
      const double w = shape.norm_topk ? p[size_t(e)] / top : p[size_t(e)];
      mlp(gate[size_t(e)], up[size_t(e)], down[size_t(e)], xn, y);
      for (int64_t c = 0; c < C; ++c) acc[size_t(c)] += w * y[size_t(c)];
    }
    if (shared_gate) {
      double z = 0;
      for (int64_t c = 0; c < C; ++c) z += double(shared_gate_w->data<float>()[c]) * xn[c];
      const double g = 1.0 / (1.0 + std::exp(-z));
      mlp(*shared_gate, *shared_up, *shared_down, xn, y);
      for (int64_t c = 0; c < C; ++c) acc[size_t(c)] += g * y[size_t(c)];
    }
    for (int64_t c = 0; c < C; ++c) out.data<float>()[n * C + c] = float(acc[size_t(c)]);
  }
}

}  // namespace tensorpar
