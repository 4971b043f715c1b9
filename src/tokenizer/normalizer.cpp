// Normalizer steps. ICU does the Unicode work on UTF-16; text is handed to it one valid UTF-8 run
// at a time, so invalid bytes survive untouched (HF never sees them: Python strings are valid).
#include "tokenizer/normalizer.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tensorpar {
namespace {

void icu_check(UErrorCode err, const char* what) {
  TP_CHECK(U_SUCCESS(err), "[Normalizer] ICU ", what, ": ", u_errorName(err));
}

std::u16string to_utf16(std::string_view s) {
  std::u16string out(s.size(), u'\0');
  int32_t len = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strFromUTF8(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), &len,
                s.data(), static_cast<int32_t>(s.size()), &err);
  icu_check(err, "u_strFromUTF8");
  out.resize(static_cast<size_t>(len));
  return out;
}

void append_utf8(std::string& out, const std::u16string& s) {
  int32_t len = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strToUTF8(nullptr, 0, &len, reinterpret_cast<const UChar*>(s.data()),
              static_cast<int32_t>(s.size()), &err);
  if (err != U_BUFFER_OVERFLOW_ERROR) icu_check(err, "u_strToUTF8");
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(len));
  err = U_ZERO_ERROR;
  u_strToUTF8(out.data() + at, len, &len, reinterpret_cast<const UChar*>(s.data()),
              static_cast<int32_t>(s.size()), &err);
  icu_check(err, "u_strToUTF8");
}

// Runs an ICU UTF-16 transform with the usual preflight: call, grow on overflow, call again.
template <class F>
std::u16string icu_transform(const std::u16string& src, F&& f, const char* what) {
  std::u16string dst(src.size() + 16, u'\0');
  UErrorCode err = U_ZERO_ERROR;
  int32_t n = f(reinterpret_cast<UChar*>(dst.data()), static_cast<int32_t>(dst.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    dst.assign(static_cast<size_t>(n), u'\0');
    err = U_ZERO_ERROR;
    n = f(reinterpret_cast<UChar*>(dst.data()), n, &err);
  }
  icu_check(err, what);
  dst.resize(static_cast<size_t>(n));
  return dst;
}

std::u16string transform_run(const std::u16string& s, NormalizerStep::Kind form) {
  using K = NormalizerStep::Kind;
  const UChar* src = reinterpret_cast<const UChar*>(s.data());
  const auto n = static_cast<int32_t>(s.size());
  if (form == K::kLowercase) {
    // One code point at a time: HF lower-cases each char on its own (Rust's char::to_lowercase),
    // without the final-sigma context rule that whole-string lower-casing applies.
    std::u16string out;
    for (int32_t i = 0; i < n;) {
      const int32_t len = U16_IS_LEAD(src[i]) && i + 1 < n && U16_IS_TRAIL(src[i + 1]) ? 2 : 1;
      const std::u16string one(s, static_cast<size_t>(i), static_cast<size_t>(len));
      out += icu_transform(
          one,
          [&](UChar* d, int32_t cap, UErrorCode* e) {
            return u_strToLower(d, cap, reinterpret_cast<const UChar*>(one.data()), len, "", e);
          },
          "u_strToLower");
      i += len;
    }
    return out;
  }
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* norm = form == K::kNfc    ? unorm2_getNFCInstance(&err)
                             : form == K::kNfd  ? unorm2_getNFDInstance(&err)
                             : form == K::kNfkc ? unorm2_getNFKCInstance(&err)
                                                : unorm2_getNFKDInstance(&err);
  icu_check(err, "unorm2_get*Instance");
  return icu_transform(
      s,
      [&](UChar* d, int32_t cap, UErrorCode* e) {
        return unorm2_normalize(norm, src, n, d, cap, e);
      },
      "unorm2_normalize");
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  return true;
}

std::string strip(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      const Utf8Char c = utf8_next(s, b);
      if (!(c.valid && is_whitespace(c.cp))) break;
      b += static_cast<size_t>(c.len);
    }
  }
  if (right) {
    size_t last_non_ws = b;  // end of the last non-whitespace character
    for (size_t i = b; i < e;) {
      const Utf8Char c = utf8_next(s, i);
      i += static_cast<size_t>(c.len);
      if (!(c.valid && is_whitespace(c.cp))) last_non_ws = i;
    }
    e = last_non_ws;
  }
  return std::string(s.substr(b, e - b));
}

// Replaces each match by content, or (isolate) puts a space on each side of it.
std::string replace_all(std::string_view s, const Regex& re, std::string_view content,
                        bool isolate = false) {
  std::string out;
  size_t done = 0;
  for (const auto& [b, e] : re.find_all(s)) {
    out.append(s.substr(done, b - done));
    if (isolate) {
      out += ' ';
      out.append(s.substr(b, e - b));
      out += ' ';
    } else {
      out.append(content);
    }
    done = e;
  }
  out.append(s.substr(done));
  return out;
}

}  // namespace

std::string unicode_normalize(std::string_view text, NormalizerStep::Kind form) {
  if (is_ascii(text)) {  // every normal form leaves ASCII alone
    std::string out(text);
    if (form == NormalizerStep::Kind::kLowercase)
      for (char& c : out)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return out;
  }
  std::string out;
  out.reserve(text.size());
  size_t run = 0;  // start of the current valid run
  auto flush = [&](size_t end) {
    if (end > run) append_utf8(out, transform_run(to_utf16(text.substr(run, end - run)), form));
  };
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = utf8_next(text, i);
    if (!c.valid) {
      flush(i);
      out.append(text.substr(i, static_cast<size_t>(c.len)));
      run = i + static_cast<size_t>(c.len);
    }
    i += static_cast<size_t>(c.len);
  }
  flush(text.size());
  return out;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  using K = NormalizerStep::Kind;
  for (const NormalizerStep& step : steps_) {
    switch (step.kind) {
      case K::kReplace:
        s = replace_all(s, *step.pattern, step.content);
        break;
      case K::kIsolate:
        s = replace_all(s, *step.pattern, "", true);
        break;
      case K::kPrepend:
        if (!s.empty()) s.insert(0, step.content);
        break;
      case K::kStrip:
        s = strip(s, step.left, step.right);
        break;
      default:
        s = unicode_normalize(s, step.kind);
    }
  }
  return s;
}

}  // namespace tensorpar
