// Collective save / reshard-on-load of parameters and AdamW moments.
#include "train/checkpoint.h"

#include <algorithm>

#include <filesystem>
#include <functional>
#include <limits>
#include <string_view>

#include "core/error.h"
#include "io/sharded_checkpoint.h"
#include "train/checkpoint_retention.h"

namespace tensorpar {
namespace fs = std::filesystem;

namespace {

ShardedTensor piece_of(const std::string& prefix, const ParamShard& p, const Tensor& t) {
  ShardedTensor s;
  s.name = prefix + p.name;
  s.tensor = t;
  s.global_shape = p.global_shape;
  s.shard_dim = p.shard_dim;
  s.begin = p.range.begin;
  s.end = p.range.end;
  return s;
}

void read_into(const ShardedCheckpointReader& r, const std::string& name, const ParamShard& p,
               Tensor& dst) {
  TP_CHECK(r.has(name), "[load_checkpoint] checkpoint ", r.dir(), " has no tensor '", name, "'");
  const Shape g = r.global_shape(name);
  TP_CHECK(g == p.global_shape, "[load_checkpoint] tensor '", name, "' in ", r.dir(),
           " has global shape ", nlohmann::json(g).dump(), ", expected ",
           nlohmann::json(p.global_shape).dump());
  if (p.value->numel() == 0) return;
  Tensor t = p.shard_dim < 0 ? r.read_full(name)
                             : r.read_slice(name, p.shard_dim, p.range.begin, p.range.end);
  TP_CHECK(t.shape() == dst.shape(), "[load_checkpoint] slice of '", name, "' is ", t.describe(),
           ", expected ", dst.describe());
  dst.copy_from(t);
}

// Every rank writes its shard into tmp; the lead writes the index and publishes tmp as root/name.
void write_and_publish(const std::string& root, int64_t step, const std::string& tmp,
                       const std::vector<ParamShard>& params, AdamW& opt, Communicator& tp,
                       nlohmann::json state, const SaveFault& fault, Communicator* pp, Communicator* ep,
                       const std::function<void()>& barrier, bool& published) {
  const std::string name = "step-" + std::to_string(step);
  const int n_stages = pp ? pp->size() : 1, stage = pp ? pp->rank() : 0;
  const int n_ep = ep ? ep->size() : 1, ep_rank = ep ? ep->rank() : 0;
  const int file = tp.rank() + tp.size() * (stage + n_stages * ep_rank), n_files = tp.size() * n_stages * n_ep;
  const bool lead = file == 0;
  std::vector<ShardedTensor> pieces;
  for (const ParamShard& p : params) {
    if ((p.shard_dim < 0 && tp.rank() != 0) || (!p.expert && ep_rank != 0)) continue;
    pieces.push_back(piece_of("param/", p, *p.value));
    if (!p.grad) continue;
    AdamWState& s = opt.state(p);
    pieces.push_back(piece_of("exp_avg/", p, s.exp_avg));
    pieces.push_back(piece_of("exp_avg_sq/", p, s.exp_avg_sq));
  }
  write_checkpoint_shard(tmp + "/" + checkpoint_shard_file(file, n_files), pieces);
  barrier();
  if (lead) {
    TP_CHECK(fault.fail_at != 1, "[save_checkpoint] injected fault after the shard files of ",
             name);
    state["step"] = step;
    state["optimizer_steps"] = opt.steps();
    state["tp"] = tp.size();
    state["pp"] = n_stages;
    write_checkpoint_index(tmp, n_files, state);
    TP_CHECK(fault.fail_at != 2, "[save_checkpoint] injected fault after the index of ", name);
    publish_checkpoint_dir(tmp, root, name);
    published = true;
  }
  barrier();
}

}  // namespace

void save_checkpoint(const std::string& root, int64_t step, const std::vector<ParamShard>& params,
                     AdamW& opt, Communicator& tp, nlohmann::json state, const SaveFault& fault,
                     Communicator* pp, Communicator* ep) {
  const std::string name = "step-" + std::to_string(step);
  const std::string tmp = (fs::path(root) / (".tmp-" + name)).string();
  const bool lead = tp.rank() == 0 && (!pp || pp->rank() == 0) && (!ep || ep->rank() == 0);
  bool published = false;
  // Every rank of tp x pp (x ep): within each group, then over the next dimension, then back.
  auto barrier = [&] {
    tp.barrier();
    if (pp) pp->barrier(), tp.barrier();
    if (ep) ep->barrier(), tp.barrier();
  };
  try {
    if (lead) {
      fs::create_directories(root);
      std::error_code ec;
      fs::remove_all(tmp, ec);  // the leftovers of a crashed save of the same step
      fs::create_directories(tmp);
    }
    barrier();
    write_and_publish(root, step, tmp, params, opt, tp, std::move(state), fault, pp, ep, barrier, published);
  } catch (const std::exception& e) {
    if (published)
      throw Error(detail::concat("[save_checkpoint] ", name, " was published into ", root,
                                 " (latest names it), but a rank failed after: ", e.what()));
    // Nothing was published: `latest` and every earlier checkpoint are as they were. The partial
    // directory goes (a rank still writing into it only loses that write).
    if (lead) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
    const int64_t latest = latest_step_name(root);
    const std::string kept =
        latest >= 0 ? "latest still names step-" + std::to_string(latest) : "no earlier checkpoint";
    throw Error(detail::concat("[save_checkpoint] saving ", name, " into ", root,
                               " failed and nothing was published (", kept, "): ", e.what()));
  }
}

nlohmann::json load_checkpoint(const std::string& path, const std::vector<ParamShard>& params,
                               AdamW* opt) {
  ShardedCheckpointReader r(path);
  for (const ParamShard& p : params) {
    read_into(r, "param/" + p.name, p, *p.value);
    if (opt && p.grad) {
      AdamWState& s = opt->state(p);
      read_into(r, "exp_avg/" + p.name, p, s.exp_avg);
      read_into(r, "exp_avg_sq/" + p.name, p, s.exp_avg_sq);
    }
  }
  nlohmann::json state = check_checkpoint_state(r.state(), r.dir() + "/index.json");
  if (opt) opt->set_steps(state.value("optimizer_steps", int64_t(0)));
  return state;
}

const nlohmann::json& check_checkpoint_state(const nlohmann::json& state, const std::string& where) {
  const std::string w = "[checkpoint state] " + where;
  TP_CHECK(state.is_object(), w, ": state is ", state.type_name(), ", expected an object");
  auto shown = [](const nlohmann::json& v) {
    std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
  };
  for (const char* key : {"step", "optimizer_steps", "tp", "pp", "seed"}) {
    if (!state.contains(key)) continue;
    const nlohmann::json& v = state[key];
    const bool seed = std::string_view(key) == "seed";
    const bool ok = v.is_number_unsigned()
                        ? seed || v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max())
                        : v.is_number_integer() && (seed || v.get<int64_t>() >= 0);
    TP_CHECK(ok, w, ": \"", key, "\" is ", shown(v), ", expected an integer",
             seed ? "" : " >= 0");
  }
  for (const char* key : {"tokenizer", "data"})
    TP_CHECK(!state.contains(key) || state[key].is_string(), w, ": \"", key, "\" is ",
             shown(state[key]), ", expected a string");
  if (state.contains("schedule")) {
    const nlohmann::json& j = state["schedule"];
    TP_CHECK(j.is_object(), w, ": \"schedule\" is ", shown(j), ", expected an object");
    for (const char* key : {"lr", "min_lr", "warmup", "steps"})
      TP_CHECK(!j.contains(key) || j[key].is_number(), w, ": \"schedule\".", key, " is ",
               shown(j[key]), ", expected a number");
  }
  TP_CHECK(!state.contains("run") || state["run"].is_object(), w, ": \"run\" is ",
           shown(state["run"]), ", expected an object");
  if (state.contains("divergence")) {  // the trainer's incident state (train/divergence.h)
    const nlohmann::json& d = state["divergence"];
    TP_CHECK(d.is_object(), w, ": \"divergence\" is ", shown(d), ", expected an object");
    if (d.contains("loss_window")) {
      const nlohmann::json& l = d["loss_window"];
      TP_CHECK(l.is_array() && std::all_of(l.begin(), l.end(), [](const nlohmann::json& v) { return v.is_number(); }),
               w, ": \"divergence\".loss_window is ", shown(l), ", expected an array of numbers");
    }
    if (d.contains("skipped_batches")) {
      const nlohmann::json& b = d["skipped_batches"];
      TP_CHECK(b.is_array() && std::all_of(b.begin(), b.end(),
                                           [](const nlohmann::json& v) {
                                             return v.is_number_integer() && v.get<int64_t>() >= 1;
                                           }),
               w, ": \"divergence\".skipped_batches is ", shown(b), ", expected an array of batch numbers >= 1");
    }
  }
  return state;
}

nlohmann::json read_checkpoint_state(const std::string& path) {
  const ShardedCheckpointReader r(path);
  return check_checkpoint_state(r.state(), r.dir() + "/index.json");
}

std::string checkpoint_root(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.has_parent_path() && p.filename().empty()) p = p.parent_path();  // "runs/x/step-4/"
  if (fs::exists(p / "latest") || !fs::exists(p / "index.json")) return path;
  const fs::path parent = p.parent_path();
  return parent.empty() ? "." : parent.string();
}

int64_t latest_checkpoint_step(const std::string& root) {
  if (!fs::exists(fs::path(root) / "latest")) return -1;
  return read_checkpoint_state(root).value("step", int64_t(0));
}

}  // namespace tensorpar
