// Ember's version, following Semantic Versioning 2.0 (the rules and the history: CHANGELOG.md).
// The three numbers below are the one source of the version: CMake reads them for the package
// version (find_package(ember 0.2)), the shared library's SONAME and ember.pc.
#pragma once

#define EMBER_VERSION_MAJOR 0
#define EMBER_VERSION_MINOR 2
#define EMBER_VERSION_PATCH 0

#define EMBER_VERSION_STRINGIFY_(x) #x
#define EMBER_VERSION_STRINGIFY(x) EMBER_VERSION_STRINGIFY_(x)
// "MAJOR.MINOR.PATCH" of the headers a program was compiled against.
#define EMBER_VERSION_STRING                   \
  EMBER_VERSION_STRINGIFY(EMBER_VERSION_MAJOR) \
  "." EMBER_VERSION_STRINGIFY(EMBER_VERSION_MINOR) "." EMBER_VERSION_STRINGIFY(EMBER_VERSION_PATCH)

namespace ember {

struct Version {
  int major;
  int minor;
  int patch;
};

// The version of the library the program runs against, which can be newer than the headers it
// was compiled with (EMBER_VERSION_*) when the shared library was upgraded in place.
Version version();
// The same as "MAJOR.MINOR.PATCH".
const char* version_string();

}  // namespace ember
