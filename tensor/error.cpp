// ember::Error and the throw helper behind the EMBER_CHECK macros.
#include "ember/tensor/error.h"

namespace ember {

const char* status_name(Status s) {
  switch (s) {
    case Status::bad_param:
      return "bad_param";
    case Status::not_supported:
      return "not_supported";
    case Status::alloc_failed:
      return "alloc_failed";
    case Status::arch_mismatch:
      return "arch_mismatch";
    case Status::execution_failed:
      return "execution_failed";
    case Status::internal:
      return "internal";
  }
  return "unknown";
}

Error::Error(Status status, const std::string& message)
    : std::runtime_error(std::string("[") + status_name(status) + "] " + message),
      status_(status),
      message_(message) {}

namespace detail {
void throw_error(Status status, const char* file, int line, const std::string& msg) {
  (void)file;
  (void)line;
  throw Error(status, msg);
}
}  // namespace detail

}  // namespace ember
