// NFC per Unicode UAX #15: decompose fully (Hangul algorithmically), sort combining marks by
// class, then compose each mark with the last starter unless blocked. Tables: nfc_tables.cpp.
#include "tokenizer/nfc.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "tokenizer/unicode.h"

namespace tensorpar {
namespace {

using nfc_detail::Decomposition;

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;
constexpr uint32_t kRawByte = 0x80000000u;  // marks an invalid input byte kept verbatim

const Decomposition* find_decomposition(uint32_t cp) {
  const auto* begin = nfc_detail::kDecompositions;
  const auto* end = begin + nfc_detail::kDecompositionCount;
  const auto* it =
      std::lower_bound(begin, end, cp, [](const Decomposition& d, uint32_t v) { return d.cp < v; });
  return it != end && it->cp == cp ? it : nullptr;
}

// (first, second) -> composite, for the primary composites; built once, immutable afterwards.
const std::unordered_map<uint64_t, uint32_t>& composition_map() {
  static const std::unordered_map<uint64_t, uint32_t> map = [] {
    std::unordered_map<uint64_t, uint32_t> m;
    for (int i = 0; i < nfc_detail::kDecompositionCount; ++i) {
      const Decomposition& d = nfc_detail::kDecompositions[i];
      if (d.recomposes) m.emplace((uint64_t(d.first) << 32) | d.second, d.cp);
    }
    return m;
  }();
  return map;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = cp < 0xC0 ? nullptr : find_decomposition(cp);
  if (d == nullptr) {
    out.push_back(cp);
    return;
  }
  decompose(d->first, out);
  if (d->second != 0) decompose(d->second, out);
}

// The composite of a starter and the next char, or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto& m = composition_map();
  auto it = m.find((uint64_t(a) << 32) | b);
  return it == m.end() ? 0 : it->second;
}

uint8_t ccc_of(uint32_t cp) {
  return (cp & kRawByte) ? 0 : canonical_combining_class(cp);
}

}  // namespace

uint8_t canonical_combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  const auto* begin = nfc_detail::kCccRanges;
  const auto* end = begin + nfc_detail::kCccRangeCount;
  const auto* it = std::lower_bound(
      begin, end, cp, [](const nfc_detail::CccRange& r, uint32_t v) { return r.hi < v; });
  return it != end && it->lo <= cp ? it->ccc : 0;
}

std::string nfc_normalize(std::string_view text) {
  bool simple = true;
  for (size_t i = 0; i < text.size() && simple;) {
    const Utf8Char c = utf8_next(text, i);
    simple = c.valid ? c.cp < 0x300 : true;
    i += static_cast<size_t>(c.len);
  }
  if (simple) return std::string(text);

  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = utf8_next(text, i);
    if (c.valid) {
      decompose(c.cp, cps);
    } else {
      for (int k = 0; k < c.len; ++k)
        cps.push_back(kRawByte | static_cast<uint8_t>(text[i + static_cast<size_t>(k)]));
    }
    i += static_cast<size_t>(c.len);
  }
  // Canonical ordering: a stable sort of each run of non-starters by class.
  for (size_t i = 0; i < cps.size();) {
    if (ccc_of(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc_of(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i),
                     cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  // Canonical composition: a char joins the last starter unless a char of the same or higher
  // class (or a starter) stands between them.
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  ptrdiff_t starter = -1;
  int last_class = -1;
  for (uint32_t cp : cps) {
    const int cc = ccc_of(cp);
    if (starter >= 0 && !(cp & kRawByte) && !(out[static_cast<size_t>(starter)] & kRawByte) &&
        (last_class < cc || last_class == 0)) {
      if (const uint32_t comp = compose(out[static_cast<size_t>(starter)], cp); comp != 0) {
        out[static_cast<size_t>(starter)] = comp;
        continue;
      }
    }
    if (cc == 0) starter = static_cast<ptrdiff_t>(out.size());
    last_class = cc;
    out.push_back(cp);
  }
  std::string s;
  s.reserve(text.size());
  for (uint32_t cp : out) {
    if (cp & kRawByte) {
      s += static_cast<char>(cp & 0xFF);
    } else {
      utf8_append(s, cp);
    }
  }
  return s;
}

}  // namespace tensorpar
