// Ember's version, following Semantic Versioning 2.0 (the rules and the history: CHANGELOG.md).
// The three numbers below are the one source of the version: CMake reads them for the package
// version (find_package(ember 0.2)), the shared library's SONAME and ember.pc.
#pragma once

// The version of the headers a program is compiled against (compare with #if to adapt code to a
// version). MAJOR changes break the API.
#define EMBER_VERSION_MAJOR 0
// MINOR releases add to the API without breaking it.
#define EMBER_VERSION_MINOR 2
// PATCH releases only fix bugs.
#define EMBER_VERSION_PATCH 0

// Helpers of EMBER_VERSION_STRING: the argument's spelling as a string literal, and the same after
// expanding the argument (so a macro's value, not its name, is stringified).
#define EMBER_VERSION_STRINGIFY_(x) #x
// See EMBER_VERSION_STRINGIFY_.
#define EMBER_VERSION_STRINGIFY(x) EMBER_VERSION_STRINGIFY_(x)
// "MAJOR.MINOR.PATCH" of the headers a program was compiled against.
#define EMBER_VERSION_STRING                   \
  EMBER_VERSION_STRINGIFY(EMBER_VERSION_MAJOR) \
  "." EMBER_VERSION_STRINGIFY(EMBER_VERSION_MINOR) "." EMBER_VERSION_STRINGIFY(EMBER_VERSION_PATCH)

namespace ember {

// A version's three numbers, as version() returns them.
struct Version {
  int major;  // incompatible API changes
  int minor;  // backward-compatible additions
  int patch;  // backward-compatible fixes
};

// The version of the library the program runs against, which can be newer than the headers it
// was compiled with (EMBER_VERSION_*) when the shared library was upgraded in place.
Version version();
// The same as "MAJOR.MINOR.PATCH".
const char* version_string();

}  // namespace ember
