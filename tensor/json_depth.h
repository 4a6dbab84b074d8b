// The nesting-depth limit for JSON that Ember reads (checkpoint headers and metadata, optimizer and
// scheduler state, the algorithm-cache file). JSON libraries copy, print and compare documents
// recursively, so a hostile file nested 100k levels deep overflows the stack; readers measure the
// depth of the text with json_nesting_depth before parsing it and reject anything deeper.
#pragma once
#include <cstddef>
#include <string_view>

namespace ember {

// Ember's own JSON nests at most 4 levels; 64 leaves room for any reasonable foreign writer.
constexpr int kMaxJsonDepth = 64;

// The deepest nesting of arrays and objects in `text` (string contents skipped), in one linear
// pass without recursion; stops scanning once past `limit`. Malformed text is left to the parser.
inline int json_nesting_depth(std::string_view text, int limit = kMaxJsonDepth) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace ember
