// Serving latency: decode streams every weight of a stage and the live KV cache once per step
// (roofline against the GEMM time), prefill is GEMM-bound; both pay 2 TP all-reduces per layer.
// A pipeline keeps p micro-batches in flight, so a token's interval spans all p stages.
#include "plan/serve_cost.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "plan/comm_cost.h"
#include "plan/device_cost.h"

namespace tensorpar::plan {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

double kv_dim_local(const ModelSpec& m, int tp) {
  return double(std::max<int64_t>(1, ceil_div(m.kv_heads, tp)) * m.head_dim);
}

// Parameters per device; replicated KV projections when tp > NKV are ignored (small).
double params_local(const ModelSpec& m, const ServePlan& p) {
  return double(total_parameters(m)) / (double(p.tp) * p.pp);
}
double active_params_local(const ModelSpec& m, const ServePlan& p) {
  return double(active_parameters(m)) / (double(p.tp) * p.pp);
}

double layers_per_stage(const ModelSpec& m, const ServePlan& p) {
  return double(ceil_div(m.layers, p.pp));
}

double kv_bytes_per_token(const ModelSpec& m, const ServeWorkload& w, const ServePlan& p) {
  return 2 * layers_per_stage(m, p) * kv_dim_local(m, p.tp) * w.kv_bytes;
}

// Time to stream `bytes` of this workload's weights: each format's share at its own rate.
double stream_time(const ClusterSpec& c, const ServeWorkload& w, double bytes) {
  if (w.weight_format_shares.empty()) return memory_time(c, bytes);
  double t = 0;
  for (const auto& [format, share] : w.weight_format_shares)
    t += weight_stream_time(c, share * bytes, format);
  return t;
}

double pp_hop(const ModelSpec& m, const ClusterSpec& c, const ServePlan& p, double tokens) {
  if (p.pp == 1) return 0;
  const LinkSpec& link = long(p.tp) * p.pp > c.devices_per_node ? c.inter : c.intra;
  return send_time(link, c, 2 * tokens * double(m.hidden));
}

}  // namespace

std::string serve_plan_problem(const ModelSpec& m, const ClusterSpec& c, const ServePlan& p) {
  if (p.tp < 1 || p.pp < 1 || p.replicas < 1) return "tp, pp and replicas must be >= 1";
  if (long(p.tp) * p.pp * p.replicas > c.world())
    return detail::concat("tp x pp x replicas = ", long(p.tp) * p.pp * p.replicas,
                          " exceeds the cluster's ", c.world(), " devices");
  if (p.pp > m.layers) return detail::concat("pp ", p.pp, " exceeds the ", m.layers, " layers");
  return "";
}

double decode_step_time(const ModelSpec& m, const ClusterSpec& c, const ServeWorkload& w,
                        const ServePlan& p, double concurrency, double context,
                        ServeEstimate* out) {
  // The batch is split over the p stages in flight; each stage step serves C / p sequences.
  const double group = std::max(1.0, concurrency / p.pp);
  const double weights = params_local(m, p) * w.weight_bytes;
  const double kv = group * context * kv_bytes_per_token(m, w, p);
  const double layers = layers_per_stage(m, p);
  const double q_local = double(ceil_div(m.heads, p.tp) * m.head_dim);
  const double attention_flops = 4 * group * context * q_local * layers;
  // A calibrated CPU: attention at its decode rate and a fixed time a layer, after the weight
  // stream (one core does one after the other); else attention overlaps it as GEMM work.
  const bool calibrated = c.eff.decode_attention_flops > 0;
  const double flops = 2 * active_params_local(m, p) * group + (calibrated ? 0 : attention_flops);
  const double mem_t = stream_time(c, w, weights), kv_t = memory_time(c, kv);
  const double gemm_t = gemm_time(c, flops);
  const double other_t =
      layers * c.eff.decode_layer_s / compute_share(c) +
      (calibrated ? attention_flops / (c.eff.decode_attention_flops * compute_share(c)) : 0);
  const double comm = 2 * layers * all_reduce_time(c, {p.tp, 1}, 2 * group * double(m.hidden));
  const double stage = std::max(mem_t + kv_t, gemm_t) + other_t + comm;
  if (out) {
    out->decode_weights_s = p.pp * mem_t;
    out->decode_kv_s = p.pp * kv_t;
    out->decode_compute_s = p.pp * gemm_t;
    out->decode_other_s = p.pp * other_t;
    out->decode_comm_s = p.pp * comm + (p.pp - 1) * pp_hop(m, c, p, group);
  }
  return p.pp * stage + (p.pp - 1) * pp_hop(m, c, p, group);
}

ServeEstimate estimate_serve(const ModelSpec& m, const ClusterSpec& c, const ServeWorkload& w,
                             const ServePlan& p) {
  const std::string problem = serve_plan_problem(m, c, p);
  TP_CHECK(problem.empty(), "[plan] serve tp=", p.tp, " pp=", p.pp, ": ", problem);
  ServeEstimate e;
  e.plan = p;
  e.weight_bytes = params_local(m, p) * w.weight_bytes;
  const double total_ctx = double(w.prompt_tokens + w.output_tokens);
  e.kv_bytes_per_seq = total_ctx * kv_bytes_per_token(m, w, p);
  const double free_bytes = c.memory_bytes - c.reserved_bytes - e.weight_bytes;
  e.max_concurrency = free_bytes > 0 ? int64_t(std::floor(free_bytes / e.kv_bytes_per_seq)) : 0;
  e.fits = e.max_concurrency >= 1;

  // Prefill of one prompt: the whole model's forward, sharded over tp, stage after stage.
  const double T = double(w.prompt_tokens);
  const LayerFlops f = layer_forward_flops(m, 1, T);
  const double layer_gemm = gemm_time(c, (f.linear) / p.tp) + gemm_time(c, f.attention / p.tp);
  const double layer_comm = 2 * all_reduce_time(c, {p.tp, 1}, 2 * T * double(m.hidden));
  const double head = gemm_time(c, 2 * double(m.hidden) * double(m.vocab) / p.tp);  // last token
  const double weights_read = stream_time(c, w, double(total_parameters(m)) * w.weight_bytes / p.tp);
  e.prefill_compute_s = std::max(double(m.layers) * layer_gemm + head, weights_read);
  e.prefill_comm_s = double(m.layers) * layer_comm + (p.pp - 1) * pp_hop(m, c, p, T);
  e.ttft_s = e.prefill_compute_s + e.prefill_comm_s;

  const double mid_ctx = double(w.prompt_tokens) + double(w.output_tokens) / 2;
  auto itl_at = [&](int64_t conc) { return decode_step_time(m, c, w, p, double(conc), mid_ctx); };
  int64_t conc = w.concurrency > 0 ? w.concurrency : e.max_concurrency;
  if (w.concurrency == 0 && w.slo_itl_s > 0 && conc > 0 && itl_at(conc) > w.slo_itl_s) {
    // ITL grows with the batch: the largest batch within the target, by bisection.
    int64_t lo = 0, hi = conc;
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (itl_at(mid) <= w.slo_itl_s ? lo : hi) = mid;
    }
    conc = lo;
  }
  e.concurrency = conc;
  e.memory_bytes = c.reserved_bytes + e.weight_bytes + double(conc) * e.kv_bytes_per_seq;
  if (conc > e.max_concurrency) e.fits = false;
  e.itl_s = decode_step_time(m, c, w, p, double(std::max<int64_t>(conc, 1)), mid_ctx, &e);
  e.tokens_per_s = conc > 0 ? double(p.replicas) * double(conc) / e.itl_s : 0;
  e.meets_slo = e.fits && conc >= 1 && (w.slo_ttft_s <= 0 || e.ttft_s <= w.slo_ttft_s) &&
                (w.slo_itl_s <= 0 || e.itl_s <= w.slo_itl_s);
  return e;
}

}  // namespace tensorpar::plan
