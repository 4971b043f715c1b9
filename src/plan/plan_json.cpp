// JSON field names are the ones docs/planner.md documents; times in seconds unless the name
// says ms, memory in GiB.
#include "plan/plan_json.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace tensorpar::plan {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

int parse_int(const std::string& key, const std::string& v) {
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TP_CHECK(used == v.size() && x >= 0, "[plan --fix] ", key, "=", v,
           ": expected a non-negative integer");
  return x;
}
}  // namespace

nlohmann::json train_estimate_json(const TrainEstimate& e) {
  const TrainPlan& p = e.plan;
  std::vector<double> stage_gib;
  for (double bytes : e.stage_memory_bytes) stage_gib.push_back(bytes / kGiB);
  return {{"tp", p.tp},
          {"pp", p.pp},
          {"dp", p.dp},
          {"ep", p.ep},
          {"sp", p.sp},
          {"micro_batch", p.micro_batch},
          {"micro_batches", e.micro_batches},
          {"interleave", p.interleave},
          {"recompute", recompute_name(p.recompute)},
          {"zero", p.zero},
          {"fits", e.fits},
          {"memory_gib_per_device", e.memory.total() / kGiB},
          {"memory_gib_per_stage", stage_gib},
          {"step_time_s", e.step_time_s},
          {"tokens_per_s", e.tokens_per_s},
          {"tflops_per_device", e.hardware_flops_per_device * 1e-12},
          {"mfu", e.mfu},
          {"breakdown",
           {{"memory_gib",
             {{"weights", e.memory.weights / kGiB},
              {"grads", e.memory.grads / kGiB},
              {"optimizer", e.memory.optimizer / kGiB},
              {"activations", e.memory.activations / kGiB},
              {"reserved", e.memory.reserved / kGiB}}},
            {"time_s",
             {{"gemm", e.time.gemm},
              {"attention", e.time.attention},
              {"elementwise", e.time.elementwise},
              {"tp_comm", e.time.tp_comm},
              {"ep_comm", e.time.ep_comm},
              {"pp_comm", e.time.pp_comm},
              {"bubble", e.time.bubble},
              {"dp_comm", e.time.dp_comm},
              {"optimizer", e.time.optimizer}}}}}};
}

nlohmann::json serve_estimate_json(const ServeEstimate& e) {
  return {{"tp", e.plan.tp},
          {"pp", e.plan.pp},
          {"dp", e.plan.replicas},
          {"fits", e.fits},
          {"meets_slo", e.meets_slo},
          {"memory_gib_per_device", e.memory_bytes / kGiB},
          {"ttft_ms", e.ttft_s * 1e3},
          {"itl_ms", e.itl_s * 1e3},
          {"max_concurrency", e.max_concurrency},
          {"concurrency", e.concurrency},
          {"tokens_per_s", e.tokens_per_s},
          {"breakdown",
           {{"weights_gib", e.weight_bytes / kGiB},
            {"kv_gib_per_sequence", e.kv_bytes_per_seq / kGiB},
            {"prefill_compute_ms", e.prefill_compute_s * 1e3},
            {"prefill_comm_ms", e.prefill_comm_s * 1e3},
            {"decode_weights_ms", e.decode_weights_s * 1e3},
            {"decode_kv_ms", e.decode_kv_s * 1e3},
            {"decode_compute_ms", e.decode_compute_s * 1e3},
            {"decode_other_ms", e.decode_other_s * 1e3},
            {"decode_comm_ms", e.decode_comm_s * 1e3}}}};
}

TrainConstraints parse_fixed_plan(const std::string& spec) {
  TrainConstraints c;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    TP_CHECK(eq != std::string::npos, "[plan --fix] \"", item, "\": expected key=value");
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "tp")
      c.tp = parse_int(k, v);
    else if (k == "pp")
      c.pp = parse_int(k, v);
    else if (k == "dp")
      c.dp = parse_int(k, v);
    else if (k == "ep")
      c.ep = parse_int(k, v);
    else if (k == "micro_batch")
      c.micro_batch = parse_int(k, v);
    else if (k == "interleave")
      c.interleave = parse_int(k, v);
    else if (k == "zero")
      c.zero = parse_int(k, v);
    else if (k == "recompute")
      c.recompute = recompute_name(parse_recompute(v));
    else if (k == "sp") {
      TP_CHECK(v == "on" || v == "off" || v == "1" || v == "0", "[plan --fix] sp=", v,
               ": expected on | off");
      c.sp = (v == "on" || v == "1") ? 1 : 0;
    } else {
      TP_CHECK(false, "[plan --fix] unknown key \"", k,
               "\" (known: tp pp dp ep sp micro_batch interleave recompute zero)");
    }
  }
  return c;
}

}  // namespace tensorpar::plan
