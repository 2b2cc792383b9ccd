// tidepool_version and tidepool_status_string: the parts of the C API that
// need no allocator.
#include "tidepool/tidepool.h"
#include "util/util.hpp"

extern "C" {

const char* tidepool_version(void) { return tidepool::util::version(); }

const char* tidepool_status_string(tidepool_status status) {
  switch (status) {
    case TIDEPOOL_OK: return "ok";
    case TIDEPOOL_ERROR_OUT_OF_MEMORY: return "out of memory";
    case TIDEPOOL_ERROR_INVALID_VALUE: return "invalid value";
    case TIDEPOOL_ERROR_NOT_SUPPORTED: return "not supported";
    case TIDEPOOL_ERROR_NOT_INITIALIZED: return "not initialized";
    case TIDEPOOL_ERROR_DRIVER: return "driver error";
    case TIDEPOOL_ERROR_BAD_CONFIG: return "bad configuration";
    case TIDEPOOL_ERROR_IO: return "i/o error";
  }
  return "unknown status";
}

}  // extern "C"
