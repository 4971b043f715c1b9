// Abort path for TP_ASSERT: an invariant of ours broke, so no exception could be trusted.
#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace tensorpar::detail {

void assert_fail(const char* cond, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: internal invariant failed: %s %s\n", file, line, cond, msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace tensorpar::detail
