// Error-message helpers shared by the test suites (header-only): the message of the ember::Error a
// call throws, and a substring test for checking what it names.
#pragma once
#include <doctest/doctest.h>

#include <exception>
#include <optional>
#include <string>

#include "ember/tensor/error.h"

namespace ember::testing {

// The message (with its "[status] " prefix) of the ember::Error that f() throws. No exception, or
// one other than ember::Error, fails the test (bad input must give an Error) and returns
// "(no error)". With `status`, the Error must carry that status too.
template <typename F>
std::string error_of(F&& f, std::optional<Status> status = std::nullopt) {
  try {
    f();
  } catch (const Error& e) {
    if (status) CHECK(e.status() == *status);
    return e.what();
  } catch (const std::exception& e) {
    FAIL("an exception other than ember::Error escaped: ", e.what());
    return "(no error)";
  }
  FAIL("expected an ember::Error");
  return "(no error)";
}

// Whether `part` is in `text`; when it is not, the test log shows the text.
inline bool contains(const std::string& text, const std::string& part) {
  const bool found = text.find(part) != std::string::npos;
  if (!found) MESSAGE("'" << part << "' is not in: " << text.substr(0, 2000));
  return found;
}

}  // namespace ember::testing
