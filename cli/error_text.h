// The one line a user sees for an error: the launcher's "[launch_ranks] rank R of N failed: "
// wrapper dropped (kept as "rank R: " for a rank other than 0, whose error may be its own),
// newlines folded.
#pragma once

#include <string>

namespace tensorpar::cli {

std::string error_text(const std::string& what);

}  // namespace tensorpar::cli
