// Errors: caller mistakes throw tensorpar::Error with a bracketed location
// ("[load_safetensors] header length ... exceeds file size ..."); broken internal invariants
// abort with file:line. TP_CHECK messages are built lazily, only when the check fails.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tensorpar {

// Thrown for every caller error: bad input, bad shapes, bad files, failed collectives.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
[[noreturn]] void assert_fail(const char* cond, const char* file, int line, const std::string& msg);

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace tensorpar

// TP_CHECK(cond, "[where] what: got ", x, ", expected ", y): throws tensorpar::Error.
#define TP_CHECK(cond, ...)                                              \
  do {                                                                   \
    if (!(cond)) [[unlikely]]                                            \
      throw ::tensorpar::Error(::tensorpar::detail::concat(__VA_ARGS__)); \
  } while (0)

// TP_ASSERT(cond, "why"...): an internal invariant; aborts with file:line.
#define TP_ASSERT(cond, ...)                                                            \
  do {                                                                                  \
    if (!(cond)) [[unlikely]]                                                           \
      ::tensorpar::detail::assert_fail(#cond, __FILE__, __LINE__,                       \
                                       ::tensorpar::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
