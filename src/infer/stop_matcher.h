// Streaming text with stop strings: text is held back while it could still be the start of a
// stop string, so nothing past a stop string is ever released. Used by the generation loop and
// the server, per request.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tensorpar {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Adds text; returns the text that became final. `stopped` is set when a stop string
  // completed: the returned text is everything before it, and later calls must not be made.
  std::string push(std::string_view piece, bool& stopped);
  // Whatever is held back (the end of the stream without a stop string).
  std::string finish();
  // Everything released so far.
  const std::string& text() const { return text_; }

 private:
  std::string release(std::string s);
  std::vector<std::string> stops_;
  std::string pending_, text_;
};

}  // namespace tensorpar
