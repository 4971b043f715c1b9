// UTF-8 decoding with maximal-subpart error handling, and the White_Space property.
#include "tokenizer/unicode.h"

#include <algorithm>

namespace tensorpar {
namespace {

// Number of continuation bytes a lead byte announces, and the allowed range of the second byte
// (Unicode Table 3-7, well-formed byte sequences). Returns false for bytes that cannot lead.
bool lead_info(uint8_t b, int* n_cont, uint8_t* lo2, uint8_t* hi2) {
  *lo2 = 0x80;
  *hi2 = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    *n_cont = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    *n_cont = 2;
    if (b == 0xE0) *lo2 = 0xA0;
    if (b == 0xED) *hi2 = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    *n_cont = 3;
    if (b == 0xF0) *lo2 = 0x90;
    if (b == 0xF4) *hi2 = 0x8F;  // nothing past U+10FFFF
  } else {
    return false;
  }
  return true;
}

}  // namespace

Utf8Char utf8_next(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return {b0, 1, true};
  int n_cont = 0;
  uint8_t lo2 = 0, hi2 = 0;
  if (!lead_info(b0, &n_cont, &lo2, &hi2)) return {0xFFFD, 1, false};
  uint32_t cp = b0 & (0x3F >> n_cont);
  for (int k = 1; k <= n_cont; ++k) {
    if (i + k >= s.size()) return {0xFFFD, k, false};
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t lo = k == 1 ? lo2 : 0x80, hi = k == 1 ? hi2 : 0xBF;
    if (b < lo || b > hi) return {0xFFFD, k, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, n_cont + 1, true};
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const Utf8Char c = utf8_next(bytes, i);
    if (c.valid) {
      out.append(bytes.substr(i, static_cast<size_t>(c.len)));
    } else {
      utf8_append(out, 0xFFFD);
    }
    i += static_cast<size_t>(c.len);
  }
  return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
  // A completable tail starts at a lead byte at most 3 bytes from the end.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const size_t start = s.size() - back;
    const auto b = static_cast<uint8_t>(s[start]);
    if (b >= 0x80 && b <= 0xBF) continue;  // a continuation byte: look further back
    int n_cont = 0;
    uint8_t lo2 = 0, hi2 = 0;
    if (!lead_info(b, &n_cont, &lo2, &hi2)) return 0;
    if (static_cast<int>(back) > n_cont) return 0;  // already complete (or overlong run)
    const Utf8Char c = utf8_next(s, start);
    // Incomplete and every byte so far allowed: it consumed exactly the rest of the string.
    return (!c.valid && static_cast<size_t>(c.len) == back) ? back : 0;
  }
  return 0;
}

bool is_whitespace(uint32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace tensorpar
