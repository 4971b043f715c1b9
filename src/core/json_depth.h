// A nesting limit for JSON read from files and requests. nlohmann's parser is iterative, but
// copying, comparing, printing and destroying a value recurse once per level, so a document of a
// few hundred KB of '[' parses fine and overflows the stack later (a server request body, a
// tokenizer.json). Pass json_depth_limit(...) as the parser callback of nlohmann::json::parse.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "core/error.h"

namespace tensorpar {

// Far deeper than any file or request we read (tokenizer.json nests about 6 levels).
inline constexpr int kMaxJsonDepth = 128;

// A parser callback that throws Error("<what>: JSON nested deeper than N levels") on the first
// value below that depth, and keeps everything else.
inline auto json_depth_limit(std::string what, int max_depth = kMaxJsonDepth) {
  return [what = std::move(what), max_depth](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    TP_CHECK(depth <= max_depth, what, ": JSON nested deeper than ", max_depth, " levels");
    return true;
  };
}

}  // namespace tensorpar
