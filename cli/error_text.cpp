// Error text for the terminal (see error_text.h).
// GCC 12 with -fsanitize (the asan preset) warns maybe-uninitialized inside std::regex's own
// std::function members: a false positive in the standard library, silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "cli/error_text.h"

#include <regex>

namespace tensorpar::cli {

std::string error_text(const std::string& what) {
  static const std::regex kLauncher(R"(^\[launch_ranks\] rank (\d+) of (\d+) failed: )");
  std::string s = what;
  std::smatch m;
  // Nested launches (a rank's error rethrown by an outer launcher) repeat the prefix.
  while (std::regex_search(s, m, kLauncher)) {
    const std::string rank = m[1].str(), n = m[2].str();
    s = (rank == "0" ? "" : "rank " + rank + ": ") + m.suffix().str();
  }
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace tensorpar::cli
