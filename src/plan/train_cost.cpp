// Training memory and step time per device. The structure follows Megatron-LM's execution:
// TP collectives on the critical path, 1F1B (optionally interleaved) pipeline, DP gradient
// reduction after (or overlapped with) the last backward, then the optimizer step.
#include "plan/train_cost.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "plan/comm_cost.h"
#include "plan/device_cost.h"

namespace tensorpar::plan {

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

Recompute parse_recompute(const std::string& s) {
  if (s == "none" || s == "off") return Recompute::kNone;
  if (s == "selective") return Recompute::kSelective;
  if (s == "full") return Recompute::kFull;
  TP_CHECK(false, "[parse_recompute] recompute must be none | selective | full, got \"", s, "\"");
  return Recompute::kNone;
}

namespace {

constexpr double kAct = 2;  // bytes per activation element (16-bit)

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The sizes one TP rank holds: the largest of the balanced uneven ranges; KV heads are
// replicated when tp exceeds them (whole KV groups per rank, docs/shapes.md).
struct LocalSizes {
  double heads, q, kv, ffn, vocab;
};
LocalSizes local_sizes(const ModelSpec& m, int tp) {
  LocalSizes l;
  l.heads = double(ceil_div(m.heads, tp));
  l.q = l.heads * double(m.head_dim);
  l.kv = double(std::max<int64_t>(1, ceil_div(m.kv_heads, tp)) * m.head_dim);
  l.ffn = double(ceil_div(m.ffn, tp));
  l.vocab = double(ceil_div(m.vocab, tp));
  return l;
}

double mlp_mats(const ModelSpec& m) {
  return m.mlp == MlpMatrices::kGated ? 3 : 2;
}
double routed(const ModelSpec& m) {
  return m.is_moe() ? double(m.experts_per_token) : 1.0;
}

// Parameters of one layer on one device (experts split over ep, matrices over tp).
double layer_params_local(const ModelSpec& m, int tp, int ep) {
  const LocalSizes l = local_sizes(m, tp);
  const double C = double(m.hidden);
  double p = C * (l.q + 2 * l.kv) + l.q * C;
  if (m.linear_biases || m.qkv_bias) p += l.q + 2 * l.kv;
  if (m.linear_biases) p += C;
  const double experts_local = m.is_moe() ? double(m.experts) / ep : 1.0;
  double mlp = mlp_mats(m) * C * l.ffn;
  if (m.linear_biases) mlp += (mlp_mats(m) - 1) * l.ffn + C;
  p += experts_local * mlp + C * double(m.experts) + 2.0 * m.norm_vectors * C;
  return p;
}

// Layers of pipeline stage i: an even split, the earlier stages taking one more where it does
// not divide (as the trainer splits them).
int64_t stage_layers(const ModelSpec& m, int pp, int i) {
  return m.layers / pp + (i < m.layers % pp ? 1 : 0);
}

// Parameters per device of pipeline stage i: its layers, the embedding on the first, the final
// norm and LM head on the last.
double stage_params(const ModelSpec& m, const TrainPlan& p, int i) {
  const LocalSizes l = local_sizes(m, p.tp);
  const double body = double(stage_layers(m, p.pp, i)) * layer_params_local(m, p.tp, p.ep);
  const double emb = (l.vocab + double(m.positions)) * double(m.hidden);
  // The head needs its own copy of a tied embedding when it lives on another stage.
  const bool own_head = !m.tied_embeddings || p.pp > 1;
  const double head = m.norm_vectors * double(m.hidden) + (own_head ? l.vocab * m.hidden : 0.0);
  return body + (i == 0 ? emb : 0.0) + (i == p.pp - 1 ? head : 0.0);
}

// One micro-batch through one layer on one device: forward, backward and recomputation.
struct LayerCost {
  double gemm = 0, attention = 0, elementwise = 0, tp_comm = 0, ep_comm = 0;
  double total() const { return gemm + attention + elementwise + tp_comm + ep_comm; }
};

LayerCost layer_cost(const ModelSpec& m, const ClusterSpec& c, const TrainPlan& p, double s,
                     double act_bytes) {
  const LocalSizes l = local_sizes(m, p.tp);
  const double b = p.micro_batch, tok = b * s, C = double(m.hidden);
  const double k = routed(m);
  const double fwd_all = 1 + 2 + (p.recompute == Recompute::kFull ? 1 : 0);
  const double fwd_attn = fwd_all + (p.recompute == Recompute::kSelective ? 1 : 0);
  LayerCost lc;
  // Linear layers: each forward GEMM has two backward GEMMs of the same size.
  double linear = gemm_time(c, 2 * tok * C * (l.q + 2 * l.kv)) + gemm_time(c, 2 * tok * l.q * C);
  if (m.is_moe()) {
    const double experts_local = double(m.experts) / p.ep;
    const double tok_per_expert = tok * k / experts_local;
    linear += gemm_time(c, 2 * tok_per_expert * C * l.ffn, mlp_mats(m) * experts_local);
    linear += gemm_time(c, 2 * tok * C * double(m.experts));
  } else {
    linear += gemm_time(c, 2 * tok * C * l.ffn, mlp_mats(m));
  }
  lc.gemm = fwd_all * linear;
  lc.attention = fwd_attn * attention_time(c, 2 * b * s * s * l.q, s, 2);
  // Memory-bound work, elements read + written per token and hidden element (over tp ranks under
  // SP: norms, residual adds, dropout) and per inner element (the activation function); without a
  // fused attention kernel the s x s scale-mask-softmax(-dropout), backward twice its forward.
  // eff.fused_elementwise (Megatron's fused kernels): forward two norms (2 each) and two residual
  // adds (3 each; bias-dropout-adds 3.5 with a 1-byte mask), backward 12 (17 with dropout); the
  // activation function 2 (3 gated) forward, 3 (5 gated) backward. Otherwise (an op at a time, as
  // tensorpar's trainer runs them): forward 10 (16 with dropout) and 2 (3 gated), backward twice
  // the forward. Full recomputation runs the forward again, selective the scores.
  const bool gated = m.mlp == MlpMatrices::kGated;
  double rep_fwd = m.dropout ? 16 : 10, rep_bwd = 2 * rep_fwd;
  const double act_fwd = gated ? 3 : 2;
  double act_bwd = 2 * act_fwd;
  if (c.eff.fused_elementwise) {
    rep_fwd = m.dropout ? 11 : 10, rep_bwd = m.dropout ? 17 : 12;
    act_bwd = gated ? 5 : 3;
  }
  const double rep = tok * C / (p.sp ? p.tp : 1), act = tok * l.ffn * k;
  const double scores = c.eff.fused_attention ? 0 : (m.dropout ? 4.5 : 2) * b * l.heads * s * s;
  const double forwards = p.recompute == Recompute::kFull ? 2 : 1;
  lc.elementwise = memory_time(c, act_bytes * (forwards * (rep_fwd * rep + act_fwd * act) +
                                               rep_bwd * rep + act_bwd * act + fwd_attn * scores));
  // TP: an all-reduce after each row-parallel layer forward (2), one for each column-parallel
  // layer's input gradient (2), the recomputed forward's 2 under full recomputation. Under SP each
  // is an all-gather plus a reduce-scatter of the same bytes, and the backward gathers the
  // column-parallel layers' inputs again (only this rank's rows were kept): 2 all-gathers more.
  const double n_ar = 4 + (p.recompute == Recompute::kFull ? 2 : 0);
  const double bytes = act_bytes * tok * C;
  const GroupShape tp{p.tp, 1};
  const double half = all_gather_time(c, tp, bytes);  // an all-gather or a reduce-scatter
  const double one = p.sp ? 2 * half : all_reduce_time(c, tp, bytes);
  const double regather = p.sp ? 2 * half : 0;
  lc.tp_comm = n_ar * one + regather;
  // eff.tp_overlap: the column-parallel layers' input-gradient collectives (all-reduces, or
  // reduce-scatters under SP) run during the weight-gradient GEMMs, SP's re-gathers during the
  // input-gradient GEMMs (each one forward's linear GEMM time). Under SP the gradient's
  // all-gathers before the row-parallel layers' backward stay exposed.
  if (c.eff.tp_overlap)
    lc.tp_comm -= std::min(p.sp ? 2 * half : 2 * one, linear) + std::min(regather, linear);
  // EP: dispatch and combine all-to-alls of the routed tokens, forward and backward.
  if (m.is_moe() && p.ep > 1)
    lc.ep_comm = n_ar * all_to_all_time(c, {p.ep, p.tp}, act_bytes * tok * k * C);
  return lc;
}

double head_time(const ModelSpec& m, const ClusterSpec& c, const TrainPlan& p, double s) {
  const LocalSizes l = local_sizes(m, p.tp);
  const double tok = double(p.micro_batch) * s;
  // Logits forward, two backward GEMMs; fp32 softmax/cross-entropy over the local vocab.
  return 3 * gemm_time(c, 2 * tok * double(m.hidden) * l.vocab) +
         memory_time(c, 3 * 4 * tok * l.vocab);
}

}  // namespace

double layer_seconds(const ModelSpec& m, const ClusterSpec& c, const TrainPlan& p, double seq,
                     double act_bytes) {
  return layer_cost(m, c, p, seq, act_bytes).total();
}

double layer_activation_bytes(const ModelSpec& m, double b, double s, int tp, bool sp, Recompute r,
                              bool fused_attention, bool fused_qkv_copy) {
  const double C = double(m.hidden), sb = s * b;
  if (r == Recompute::kFull) return kAct * sb * C / (sp ? tp : 1);  // the layer's input only
  const LocalSizes l = local_sizes(m, tp);
  // Replicated unless SP: inputs of both norms, of QKV and of the MLP; dropout masks (1 byte).
  const double rep = sb * C * (4 * kAct + (m.dropout ? 2 : 0)) / (sp ? tp : 1);
  // Sharded over TP: Q, K, V, the output projection's input, the MLP's inner activations.
  const double attn = kAct * sb * (l.q + l.kv) + kAct * sb * l.kv + kAct * sb * l.q;
  const double qkv_copy = fused_qkv_copy ? kAct * sb * (l.q + 2 * l.kv) : 0;
  const double mlp = kAct * sb * l.ffn * (m.mlp == MlpMatrices::kGated ? 3 : 2) * routed(m);
  // Softmax output (+ dropout mask and output): 5 a s^2 b with dropout, 2 without.
  const double scores = (r == Recompute::kSelective || fused_attention)
                            ? 0
                            : b * l.heads * s * s * (m.dropout ? 5 : kAct);
  return rep + attn + qkv_copy + mlp + scores;
}

std::string train_plan_problem(const ModelSpec& m, const ClusterSpec& c, const TrainWorkload& w,
                               const TrainPlan& p) {
  auto str = [](auto... a) { return detail::concat(a...); };
  if (p.tp < 1 || p.pp < 1 || p.dp < 1 || p.ep < 1 || p.micro_batch < 1 || p.interleave < 1)
    return "tp, pp, dp, ep, micro_batch and interleave must be >= 1";
  if (long(p.tp) * p.pp * p.dp != c.world())
    return str("tp x pp x dp = ", long(p.tp) * p.pp * p.dp, " but the cluster has ", c.world(),
               " devices");
  if (w.global_batch < 1 || w.seq < 1) return "global batch and sequence length must be >= 1";
  if (w.global_batch % (int64_t(p.dp) * p.micro_batch) != 0)
    return str("global batch ", w.global_batch,
               " is not a multiple of dp x micro_batch = ", int64_t(p.dp) * p.micro_batch);
  if (p.pp > m.layers) return str("pp ", p.pp, " exceeds the ", m.layers, " layers");
  const int64_t micro = w.global_batch / (int64_t(p.dp) * p.micro_batch);
  if (p.interleave > 1) {
    if (p.pp == 1) return "interleave > 1 needs pp > 1";
    if (m.layers % (int64_t(p.pp) * p.interleave) != 0)
      return str("layers ", m.layers,
                 " not divisible by pp x interleave = ", int64_t(p.pp) * p.interleave);
    if (micro % p.pp != 0)
      return str("interleaved schedule needs micro-batches (", micro, ") divisible by pp ", p.pp);
  }
  if (p.sp && p.tp == 1) return "sp needs tp > 1";
  if (p.zero < 0 || p.zero > 1) return "zero must be 0 or 1";
  if (p.ep > 1) {
    if (!m.is_moe()) return "ep > 1 needs an MoE model";
    if (p.dp % p.ep != 0) return str("ep ", p.ep, " must divide dp ", p.dp);
    if (m.experts % p.ep != 0) return str("ep ", p.ep, " must divide the ", m.experts, " experts");
  }
  return "";
}

TrainEstimate estimate_train(const ModelSpec& m, const ClusterSpec& c, const TrainWorkload& w,
                             const TrainPlan& p) {
  const std::string problem = train_plan_problem(m, c, w, p);
  TP_CHECK(problem.empty(), "[plan] tp=", p.tp, " pp=", p.pp, " dp=", p.dp, ": ", problem);
  TrainEstimate e;
  e.plan = p;
  const double s = double(w.seq), b = p.micro_batch;
  const int64_t m_micro = w.global_batch / (int64_t(p.dp) * p.micro_batch);
  e.micro_batches = m_micro;
  const double layers_stage = double(ceil_div(m.layers, p.pp));

  // Time of one micro-batch on the bottleneck stage (the last: its layers plus the head).
  const double act_scale = w.activation_bytes / kAct;  // formulas below count 16-bit elements
  const LayerCost lc = layer_cost(m, c, p, s, w.activation_bytes);
  const double head = head_time(m, c, p, s);
  const double per_micro = layers_stage * lc.total() + head;
  const double mm = double(m_micro);
  e.time.gemm = mm * (layers_stage * lc.gemm + head);
  e.time.attention = mm * layers_stage * lc.attention;
  e.time.elementwise = mm * layers_stage * lc.elementwise;
  e.time.tp_comm = mm * layers_stage * lc.tp_comm;
  e.time.ep_comm = mm * layers_stage * lc.ep_comm;
  e.time.bubble = double(p.pp - 1) / p.interleave * per_micro;
  if (p.pp > 1) {
    // Activations (and their gradients) to the neighbour stage; between nodes Megatron splits
    // them over the tp NICs and all-gathers over NVLink (scatter/gather).
    const double bytes = w.activation_bytes * b * s * double(m.hidden);
    const bool inter = long(p.tp) * p.dp >= c.devices_per_node;
    double one = inter ? send_time(c.inter, c, bytes / p.tp) + all_gather_time(c, {p.tp, 1}, bytes)
                       : send_time(c.intra, c, bytes);
    e.time.pp_comm = 2 * (mm * p.interleave + p.pp - 1) * one;
  }
  double params = 0;  // the fullest stage's
  for (int i = 0; i < p.pp; ++i) params = std::max(params, stage_params(m, p, i));
  const GroupShape dp{p.dp, p.tp};
  double dp_time = p.zero == 1 ? all_gather_time(c, dp, params * w.grad_bytes) +
                                     all_gather_time(c, dp, params * w.weight_bytes)
                               : all_reduce_time(c, dp, params * w.grad_bytes);
  if (c.eff.dp_overlap) {
    const double fwd_units = p.recompute == Recompute::kFull ? 2 : 1;
    dp_time = std::max(0.0, dp_time - per_micro * 2 / (2 + fwd_units));
  }
  e.time.dp_comm = dp_time;
  // AdamW reads weights, grads, master weights and two moments, and writes all but the grads;
  // the gradient norm (clipping) reads the grads once more, and zeroing them writes them.
  const double adam_bytes = 2 * (w.weight_bytes + w.optimizer_bytes) + 3 * w.grad_bytes;
  e.time.optimizer = memory_time(c, adam_bytes * params / (p.zero == 1 ? p.dp : 1));
  // Ranks time-slicing a CPU's cores unevenly (3 on 2): TP and PP ranks meet every layer or
  // micro-batch, so they run at the pace of the core that holds the most of them; DP ranks meet
  // once a step and let the scheduler balance.
  double scale = p.tp > 1 || p.pp > 1 ? lockstep_slowdown(c) : 1.0;
  TrainTime& t = e.time;
  if (compute_share(c) < 1 && p.pp > 1 && int64_t(p.tp) * p.pp * p.dp <= c.devices_per_node) {
    // Ranks time-slicing a CPU's cores (all stages on one node): a stage that waits (the bubble,
    // a slower stage) leaves its core to the others, so the pipeline takes the node's work over
    // its cores, i.e. the stages' busy time averaged over the stages (at that pace), or at least
    // the busiest stage's own work at a whole core. Its parts scale to that time; no bubble is left.
    const double busy = t.gemm + t.attention + t.elementwise + t.tp_comm + t.ep_comm + t.pp_comm;
    const double average = mm * (double(m.layers) * lc.total() + head) / p.pp + t.pp_comm;
    scale = std::min(scale, std::max(scale * average, compute_share(c) * busy) / busy);
    t.bubble = 0;
  }
  for (double* part : {&t.gemm, &t.attention, &t.elementwise, &t.tp_comm, &t.ep_comm, &t.pp_comm, &t.bubble})
    *part *= scale;
  e.step_time_s = e.time.total();

  // Memory per device of every stage; the plan's figure is the fullest stage's.
  const double opt_div = p.zero == 1 ? p.dp : 1;
  const bool tp_buffers = c.eff.tensorpar_buffers;
  const double act_layer = act_scale * layer_activation_bytes(m, b, s, p.tp, p.sp, p.recompute,
                                                              c.eff.fused_attention, tp_buffers);
  // tensorpar (eff.tensorpar_buffers): per micro-batch held, the stage's output and the gradients
  // d_x, d_h (rows, h), + the final norm's output on the last stage; under SP the three gathered
  // (s b, h) buffers every layer and micro-batch of the stage share.
  const double rows = b * s / (p.sp ? p.tp : 1), C = double(m.hidden);
  const double state = tp_buffers ? act_scale * kAct * rows * C * 3 : 0;
  const double head_state = tp_buffers ? act_scale * kAct * rows * C : 0;
  const double sp_scratch = tp_buffers && p.sp ? act_scale * kAct * b * s * C * 3 : 0;
  // 1F1B: stage i keeps min(m, p - i) micro-batches in flight; interleaving adds (p - 1) / (p v)
  // of that (Korthikanti et al. 2022, section 4.2.3, for the first stage; taken for every one).
  const double interleaved = p.interleave > 1 ? 1 + double(p.pp - 1) / (double(p.pp) * p.interleave) : 1;
  // Full recomputation: one layer's activations while it is recomputed.
  const double recomputed = p.recompute == Recompute::kFull
                                ? act_scale * layer_activation_bytes(m, b, s, p.tp, p.sp, Recompute::kNone,
                                                                     c.eff.fused_attention, tp_buffers)
                                : 0;
  const double logits = 2 * 4 * b * s * local_sizes(m, p.tp).vocab;  // fp32 logits + gradient
  for (int i = 0; i < p.pp; ++i) {
    const double in_flight = double(std::min<int64_t>(m_micro, p.pp - i)) * interleaved;
    TrainMemory mem;
    const double prm = stage_params(m, p, i);
    mem.weights = prm * w.weight_bytes;
    mem.grads = prm * w.grad_bytes;
    mem.optimizer = prm * w.optimizer_bytes / opt_div;
    mem.activations = double(stage_layers(m, p.pp, i)) * act_layer * in_flight + recomputed +
                      state * in_flight + sp_scratch + (i == p.pp - 1 ? logits + head_state : 0.0);
    mem.reserved = c.reserved_bytes;
    e.stage_memory_bytes.push_back(mem.total());
    if (mem.total() > e.memory.total()) e.memory = mem;
  }
  e.fits = e.memory.total() <= c.memory_bytes;

  // Throughput figures.
  const double B = double(w.global_batch);
  e.tokens_per_s = B * s / e.step_time_s;
  const LayerFlops f = layer_forward_flops(m, B, s);
  const double extra = p.recompute == Recompute::kFull        ? f.linear + f.attention
                       : p.recompute == Recompute::kSelective ? f.attention
                                                              : 0;
  const double model_flops = model_flops_per_iteration(m, B, s);
  const double hw_flops = model_flops + double(m.layers) * extra;
  const double devices = c.world();
  e.hardware_flops_per_device = hw_flops / (e.step_time_s * devices);
  e.mfu = model_flops / (e.step_time_s * devices * c.peak_flops);
  return e;
}

}  // namespace tensorpar::plan
