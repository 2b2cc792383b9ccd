// See version.hpp.
#include "util/version.hpp"

#ifndef TIDEPOOL_VERSION_STRING
#error "TIDEPOOL_VERSION_STRING comes from src/util/CMakeLists.txt"
#endif

namespace tidepool::util {

const char* version() noexcept { return TIDEPOOL_VERSION_STRING; }

}  // namespace tidepool::util
