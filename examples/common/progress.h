// examples/common: the progress line of the example programs, rewritten in place with '\r'.
// Whatever else is printed while it shows (an epoch summary, a sample, an error) first ends it, so
// that nothing is written on top of a half line: finish() replaces it with a final text and a
// newline, end() just moves to a new line (before an error on stderr).
#pragma once
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <string>

namespace ember::examples {

class ProgressLine {
 public:
  // Rewrites the line (printf-style); pads over a longer previous text.
  void show(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    va_list args;
    va_start(args, fmt);
    const std::string text = format(fmt, args);
    va_end(args);
    write(text, false);
  }
  // Rewrites the line one last time and ends it (a summary in place of the progress).
  void finish(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    va_list args;
    va_start(args, fmt);
    const std::string text = format(fmt, args);
    va_end(args);
    write(text, true);
  }
  // Ends a progress line that is showing; nothing otherwise.
  void end() {
    if (width_ > 0) {
      std::fputc('\n', stdout);
      std::fflush(stdout);
    }
    width_ = 0;
  }

 private:
  static std::string format(const char* fmt, va_list args) {
    char buf[512];
    std::vsnprintf(buf, sizeof(buf), fmt, args);
    return buf;
  }
  void write(const std::string& text, bool last) {
    const size_t pad = width_ > text.size() ? width_ - text.size() : 0;
    std::printf("%s%s%s%s", width_ > 0 ? "\r" : "", text.c_str(), std::string(pad, ' ').c_str(),
                last ? "\n" : "");
    std::fflush(stdout);
    width_ = last ? 0 : std::max<size_t>(text.size(), 1);
  }
  size_t width_ = 0;  // characters of the line showing; 0: none
};

// The one progress line of the process (stdout is one terminal line).
inline ProgressLine& progress_line() {
  static ProgressLine line;
  return line;
}

// An error for the user: ends the progress line first, then prints "error: ..." on stderr.
inline void print_error(const char* what) {
  progress_line().end();
  std::fprintf(stderr, "error: %s\n", what);
}

}  // namespace ember::examples
