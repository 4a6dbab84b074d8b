// examples/common: text that is valid UTF-8. A character model samples bytes, which need not form
// valid sequences: sanitize_utf8 replaces every invalid or cut-off sequence by U+FFFD, and
// utf8_incomplete_tail says how many bytes a cut-off last sequence still lacks (so a sampler can
// finish the character instead of cutting it).
#pragma once
#include <cstddef>
#include <string>

namespace ember::examples {

// The length of the sequence that starts with lead byte `b` (1-4), or 0 for a byte that cannot
// start one (a continuation byte, or C0, C1, F5-FF).
inline int utf8_sequence_length(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Whether s[i..i+len) is a valid sequence of length len (continuation bytes, no overlong form, no
// surrogate, at most U+10FFFF).
inline bool utf8_valid_at(const std::string& s, size_t i, int len) {
  if (i + size_t(len) > s.size()) return false;
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  for (int k = 1; k < len; ++k)
    if ((b(size_t(k)) & 0xC0) != 0x80) return false;
  if (len == 3 && b(0) == 0xE0 && b(1) < 0xA0) return false;   // overlong
  if (len == 3 && b(0) == 0xED && b(1) >= 0xA0) return false;  // surrogate
  if (len == 4 && b(0) == 0xF0 && b(1) < 0x90) return false;   // overlong
  if (len == 4 && b(0) == 0xF4 && b(1) >= 0x90) return false;  // above U+10FFFF
  return true;
}

// Bytes still missing from the last sequence of `s` when it is a valid but cut-off start; else 0.
inline int utf8_incomplete_tail(const std::string& s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const int len = utf8_sequence_length(c);
    return len > int(back) ? len - int(back) : 0;
  }
  return 0;
}

// `s` with each invalid byte (or cut-off sequence) replaced by U+FFFD.
inline std::string sanitize_utf8(const std::string& s) {
  static const std::string kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const int len = utf8_sequence_length(static_cast<unsigned char>(s[i]));
    if (len > 0 && utf8_valid_at(s, i, len)) {
      out.append(s, i, size_t(len));
      i += size_t(len);
    } else {
      out += kReplacement;
      ++i;
    }
  }
  return out;
}

}  // namespace ember::examples
