// ember::version(): the library's version as compiled into it (tensor/version.h).
#include "ember/tensor/version.h"

namespace ember {

Version version() { return {EMBER_VERSION_MAJOR, EMBER_VERSION_MINOR, EMBER_VERSION_PATCH}; }

const char* version_string() { return EMBER_VERSION_STRING; }

}  // namespace ember
