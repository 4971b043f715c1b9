// Shared by the text fuzz targets: the input as text, cut into fields at NUL bytes (a JSON or
// template text holds no NUL, so a seed is "field0\0field1\0..."), and TENSORPAR_FUZZ_VERBOSE=1
// to print why an input was refused (e.g. to check that every seed of a corpus loads:
// `TENSORPAR_FUZZ_VERBOSE=1 build-fuzz/bin/fuzz_hf_config tests/fuzz/corpus/fuzz_hf_config/*`).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <vector>

namespace tensorpar::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The first `max_fields - 1` NUL-separated fields, and the rest of the input as the last one.
inline std::vector<std::string_view> split_fields(std::string_view in, size_t max_fields) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < max_fields) {
    const size_t at = in.find('\0');
    if (at == std::string_view::npos) break;
    out.push_back(in.substr(0, at));
    in.remove_prefix(at + 1);
  }
  out.push_back(in);
  return out;
}

inline bool verbose() {
  static const bool v = [] {
    const char* e = std::getenv("TENSORPAR_FUZZ_VERBOSE");
    return e != nullptr && *e != '\0' && *e != '0';
  }();
  return v;
}

// An input the parser refused as it should (a tensorpar::Error or the server's ProtocolError).
inline void refused(const std::exception& e) {
  if (verbose()) std::fprintf(stderr, "[fuzz] refused: %s\n", e.what());
}

inline void note(const char* what) {
  if (verbose()) std::fprintf(stderr, "[fuzz] %s\n", what);
}

// A broken invariant of code that accepted the input: reported as a crash, with the reason.
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "[fuzz] invariant broken: %s\n", what);
  std::abort();
}

}  // namespace tensorpar::fuzz
