// ember::Error, the one exception type of the library, and the checking macros.
// EMBER_CHECK reports a user error (bad argument, unsupported case) with a message saying what was
// wrong and what to do; EMBER_INTERNAL_ASSERT reports a bug in Ember itself.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

// What kind of failure an Error reports, so that callers can tell them apart without parsing
// messages.
enum class Status {
  bad_param,         // a bad argument: wrong shape, dtype, device or value (fix the call)
  not_supported,     // a valid request this build or op does not implement (a dtype, a device)
  alloc_failed,      // out of memory (host or GPU)
  arch_mismatch,     // the GPU's architecture has no kernel image in this build
  execution_failed,  // a CUDA, NCCL or I/O operation failed while running
  internal           // a broken invariant inside Ember: a bug to report
};

// The status's name as spelled in the enum ("bad_param", ...), the prefix of Error::what().
const char* status_name(Status s);

// The exception every Ember failure throws (derives from std::runtime_error): a Status and a
// message that names the op, the argument and the shapes, and says what to do. what() is the
// message prefixed with "[status] ".
class Error : public std::runtime_error {
 public:
  // An error of kind `status` with `message` (without the prefix).
  Error(Status status, const std::string& message);
  // The kind of failure.
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

// Throws ember::Error with the given status (a Status enumerator's name, e.g. not_supported) and
// the streamed message, unconditionally.
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
