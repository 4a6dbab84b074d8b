// ember::Error, the one exception type of the library, and the checking macros.
// EMBER_CHECK reports a user error (bad argument, unsupported case) with a message saying what was
// wrong and what to do; EMBER_INTERNAL_ASSERT reports a bug in Ember itself.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

enum class Status {
  bad_param,
  not_supported,
  alloc_failed,
  arch_mismatch,
  execution_failed,
  internal
};

const char* status_name(Status s);

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message);
  Status status() const noexcept { return status_; }
  // The message without the "[status] " prefix.
  const std::string& message() const noexcept { return message_; }

 private:
  Status status_;
  std::string message_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(Status status, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace ember

// User error: throws ember::Error(bad_param) with the streamed message when cond is false.
#define EMBER_CHECK(cond, ...)                                                     \
  do {                                                                             \
    if (!(cond)) [[unlikely]]                                                      \
      ::ember::detail::throw_error(::ember::Status::bad_param, __FILE__, __LINE__, \
                                   ::ember::detail::concat(__VA_ARGS__));          \
  } while (0)

// Like EMBER_CHECK with an explicit status (not_supported, alloc_failed, ...).
#define EMBER_CHECK_STATUS(cond, status, ...)                                   \
  do {                                                                          \
    if (!(cond)) [[unlikely]]                                                   \
      ::ember::detail::throw_error(::ember::Status::status, __FILE__, __LINE__, \
                                   ::ember::detail::concat(__VA_ARGS__));       \
  } while (0)

#define EMBER_THROW(status, ...)                                            \
  ::ember::detail::throw_error(::ember::Status::status, __FILE__, __LINE__, \
                               ::ember::detail::concat(__VA_ARGS__))

// A broken invariant inside Ember: a bug, not a user error.
#define EMBER_INTERNAL_ASSERT(cond, ...)                                                           \
  do {                                                                                             \
    if (!(cond)) [[unlikely]]                                                                      \
      ::ember::detail::throw_error(                                                                \
          ::ember::Status::internal, __FILE__, __LINE__,                                           \
          ::ember::detail::concat("internal error (please report): ", #cond, " ", ##__VA_ARGS__)); \
  } while (0)
