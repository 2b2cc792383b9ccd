// Logging: tidepool's private spdlog logger, to stderr or `log_file`, never
// stdout. spdlog and fmt are compiled in header-only and hidden; the logger
// is not registered in spdlog's global registry, so a host program that uses
// spdlog itself never sees it. Until configure_logging runs, warnings and
// errors go to stderr. Logging above debug level never happens on the hot path.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>

#include "runtime/config.hpp"

namespace tidepool::runtime {

// The logger; created on first use with level warn on stderr.
spdlog::logger& logger();
void configure_logging(const Config& config);
void flush_logging() noexcept;
// Flushes, closes the log file and frees the logger: the library is being
// unloaded, and nothing may log after.
void shutdown_logging() noexcept;

template <typename... Args>
void log_error(spdlog::format_string_t<Args...> format, Args&&... args) {
  logger().error(format, std::forward<Args>(args)...);
}
template <typename... Args>
void log_warn(spdlog::format_string_t<Args...> format, Args&&... args) {
  logger().warn(format, std::forward<Args>(args)...);
}
template <typename... Args>
void log_info(spdlog::format_string_t<Args...> format, Args&&... args) {
  logger().info(format, std::forward<Args>(args)...);
}
template <typename... Args>
void log_debug(spdlog::format_string_t<Args...> format, Args&&... args) {
  logger().debug(format, std::forward<Args>(args)...);
}

}  // namespace tidepool::runtime
