// Names for util::Error, used in log lines and error messages.
#include "util/status.hpp"

namespace tidepool::util {

const char* error_name(Error error) noexcept {
  switch (error) {
    case Error::ok: return "ok";
    case Error::out_of_memory: return "out of memory";
    case Error::invalid_value: return "invalid value";
    case Error::invalid_handle: return "invalid handle";
    case Error::other_device: return "stream of another device";
    case Error::not_supported: return "not supported";
    case Error::not_initialized: return "not initialized";
    case Error::driver_missing: return "driver missing";
    case Error::driver_error: return "driver error";
    case Error::bad_config: return "bad config";
    case Error::bad_input: return "bad input";
    case Error::io_error: return "i/o error";
  }
  return "unknown error";
}

}  // namespace tidepool::util
