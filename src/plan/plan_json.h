// Plans as JSON (the `--json` output of `tensorpar plan`) and the `--fix` syntax
// ("tp=8,pp=8,dp=1,micro_batch=1,recompute=selective,sp=on,interleave=3,zero=1,ep=1").
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "plan/search.h"

namespace tensorpar::plan {

nlohmann::json train_estimate_json(const TrainEstimate& e);
nlohmann::json serve_estimate_json(const ServeEstimate& e);

// Parses a --fix string into pins; every key must be known and every value valid.
TrainConstraints parse_fixed_plan(const std::string& spec);

}  // namespace tensorpar::plan
