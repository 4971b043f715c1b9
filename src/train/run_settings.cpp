// Run settings to and from a checkpoint's state (see run_settings.h).
#include "train/run_settings.h"

#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace tensorpar {

namespace {

// One setting: its flag and how to read / write it as JSON.
struct Setting {
  const char* flag;
  std::function<nlohmann::json(const RunSettings&)> get;
  std::function<void(RunSettings&, const nlohmann::json&)> set;
};

template <typename T>
Setting field(const char* flag, T RunSettings::*member) {
  return {flag, [member](const RunSettings& s) { return nlohmann::json(s.*member); },
          [member](RunSettings& s, const nlohmann::json& j) { s.*member = j.get<T>(); }};
}

template <typename T>
Setting train_field(const char* flag, T TrainOptions::*member) {
  return {flag, [member](const RunSettings& s) { return nlohmann::json(s.train.*member); },
          [member](RunSettings& s, const nlohmann::json& j) { s.train.*member = j.get<T>(); }};
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> all = {
      field("data", &RunSettings::data),
      field("val-fraction", &RunSettings::val_fraction),
      field("max-data-tokens", &RunSettings::max_data_tokens),
      train_field("batch", &TrainOptions::batch),
      train_field("micro-batch", &TrainOptions::micro_batch),
      train_field("seq", &TrainOptions::seq),
      train_field("steps", &TrainOptions::steps),
      train_field("lr", &TrainOptions::lr),
      train_field("min-lr", &TrainOptions::min_lr),
      train_field("warmup", &TrainOptions::warmup),
      train_field("clip", &TrainOptions::clip),
      train_field("seed", &TrainOptions::seed),
      train_field("eval-every", &TrainOptions::eval_every),
      train_field("eval-batches", &TrainOptions::eval_batches),
      train_field("save-every", &TrainOptions::save_every),
      {"keep-last", [](const RunSettings& s) { return nlohmann::json(s.train.retention.keep_last); },
       [](RunSettings& s, const nlohmann::json& j) { s.train.retention.keep_last = j.get<int64_t>(); }},
      {"keep-every", [](const RunSettings& s) { return nlohmann::json(s.train.retention.keep_every); },
       [](RunSettings& s, const nlohmann::json& j) { s.train.retention.keep_every = j.get<int64_t>(); }},
      {"weight-decay",
       [](const RunSettings& s) { return nlohmann::json(s.train.adam.weight_decay); },
       [](RunSettings& s, const nlohmann::json& j) { s.train.adam.weight_decay = j.get<float>(); }},
      {"bf16",
       [](const RunSettings& s) {
         return nlohmann::json(s.train.compute.matmul_dtype == DType::kBF16);
       },
       [](RunSettings& s, const nlohmann::json& j) {
         s.train.compute.matmul_dtype = j.get<bool>() ? DType::kBF16 : DType::kF32;
       }},
      {"recompute-layers",
       [](const RunSettings& s) { return nlohmann::json(s.train.compute.recompute_layers); },
       [](RunSettings& s, const nlohmann::json& j) {
         s.train.compute.recompute_layers = j.get<int64_t>();
       }},
      {"moe-aux-loss-coef",
       [](const RunSettings& s) { return nlohmann::json(s.train.compute.moe_aux_loss_coef); },
       [](RunSettings& s, const nlohmann::json& j) { s.train.compute.moe_aux_loss_coef = j.get<double>(); }},
      {"moe-z-loss-coef",
       [](const RunSettings& s) { return nlohmann::json(s.train.compute.moe_z_loss_coef); },
       [](RunSettings& s, const nlohmann::json& j) { s.train.compute.moe_z_loss_coef = j.get<double>(); }},
      {"on-divergence", [](const RunSettings& s) { return nlohmann::json(s.train.divergence.rollback ? "rollback" : "stop"); },
       [](RunSettings& s, const nlohmann::json& j) {
         const std::string v = j.get<std::string>();
         TP_CHECK(v == "stop" || v == "rollback", "[apply_saved_settings] on-divergence '", v,
                  "', expected stop or rollback");
         s.train.divergence.rollback = v == "rollback";
       }},
      {"spike-factor", [](const RunSettings& s) { return nlohmann::json(s.train.divergence.spike_factor); },
       [](RunSettings& s, const nlohmann::json& j) { s.train.divergence.spike_factor = j.get<double>(); }},
      {"max-rollbacks", [](const RunSettings& s) { return nlohmann::json(s.train.divergence.max_rollbacks); },
       [](RunSettings& s, const nlohmann::json& j) { s.train.divergence.max_rollbacks = j.get<int64_t>(); }},
      train_field("skip-batches", &TrainOptions::skip_batches),
      {"moe-capacity-factor",
       [](const RunSettings& s) { return nlohmann::json(s.train.compute.moe_capacity_factor); },
       [](RunSettings& s, const nlohmann::json& j) { s.train.compute.moe_capacity_factor = j.get<double>(); }},
  };
  return all;
}

std::string value_text(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (!j.is_number_float()) return j.dump();
  std::ostringstream os;
  os << j.get<double>();  // 2e-3 stored from a float reads 0.002, not 0.0020000000949949026
  return os.str();
}

// Whether a saved value has the JSON kind of this setting's own value (`mine`): an integer that
// fits int64 where mine is an integer, any finite number where mine is a float, and so on, so that
// reading it cannot overflow (a float too large for int64 would be undefined behaviour).
bool same_kind(const nlohmann::json& mine, const nlohmann::json& theirs) {
  if (mine.is_number_unsigned())  // the seed: any uint64
    return theirs.is_number_unsigned() || (theirs.is_number_integer() && theirs.get<int64_t>() >= 0);
  if (mine.is_number_integer())
    return theirs.is_number_unsigned() ? theirs.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max())
                                       : theirs.is_number_integer();
  if (mine.is_number_float()) return theirs.is_number() && std::isfinite(theirs.get<double>());
  if (mine.is_array()) {
    if (!theirs.is_array()) return false;
    for (const nlohmann::json& v : theirs)
      if (!same_kind(nlohmann::json(int64_t(0)), v)) return false;  // the lists settings hold are of integers
    return true;
  }
  return mine.type() == theirs.type();
}

}  // namespace

nlohmann::json run_settings_json(const RunSettings& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const Setting& x : settings()) j[x.flag] = x.get(s);
  return j;
}

std::string apply_saved_settings(const nlohmann::json& saved, const std::set<std::string>& given,
                                 RunSettings& s) {
  std::string changes;
  for (const Setting& x : settings()) {
    if (!saved.contains(x.flag)) continue;  // a checkpoint from before this setting was recorded
    const nlohmann::json& theirs = saved[x.flag];
    if (!given.count(x.flag)) {
      TP_CHECK(same_kind(x.get(s), theirs), "[apply_saved_settings] checkpoint setting '", x.flag, "' = ",
               theirs.dump(), " has the wrong type: expected ", x.get(s).type_name(),
               x.get(s).is_number_integer() ? " (an integer within int64)" : "");
      try {
        x.set(s, theirs);
      } catch (const nlohmann::json::exception& e) {
        TP_CHECK(false, "[apply_saved_settings] checkpoint setting '", x.flag,
                 "' = ", theirs.dump(), " has the wrong type: ", e.what());
      }
      continue;
    }
    const nlohmann::json mine = x.get(s);
    if (mine == theirs) continue;
    changes += (changes.empty() ? "--" : ", --") + std::string(x.flag) + " " + value_text(theirs) +
               " -> " + value_text(mine);
  }
  return changes;
}

}  // namespace tensorpar
