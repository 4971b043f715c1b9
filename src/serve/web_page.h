// The chat page `tensorpar serve` answers GET / with: one self-contained HTML file (inline CSS
// and JS, no external requests) that streams answers from /v1/chat/completions.
#pragma once

#include <string_view>

namespace tensorpar {

// The page. Stable element ids for tests: #input (textarea), #send, #messages; each answer is a
// `.assistant` element, each question a `.user` one. A server started with --api-key needs the
// key typed into the page's key field (#api-key); the page cannot know it.
std::string_view chat_page_html();

}  // namespace tensorpar
