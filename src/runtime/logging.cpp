// The logger's construction and configuration.
#include "runtime/logging.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <mutex>

namespace tidepool::runtime {

namespace {

std::mutex configure_lock;

std::shared_ptr<spdlog::logger> make_stderr_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto created = std::make_shared<spdlog::logger>("tidepool", sink);
  created->set_pattern("tidepool [%l] %v");
  created->set_level(spdlog::level::warn);
  created->flush_on(spdlog::level::warn);
  return created;
}

std::shared_ptr<spdlog::logger>& logger_slot() {
  // Leaked like the Runtime: logging may happen during static destruction.
  static auto* slot = new std::shared_ptr<spdlog::logger>(make_stderr_logger());
  return *slot;
}

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::off: return spdlog::level::off;
    case LogLevel::error: return spdlog::level::err;
    case LogLevel::warn: return spdlog::level::warn;
    case LogLevel::info: return spdlog::level::info;
    case LogLevel::debug: return spdlog::level::debug;
    case LogLevel::trace: return spdlog::level::trace;
  }
  return spdlog::level::warn;
}

}  // namespace

spdlog::logger& logger() { return *logger_slot(); }

void configure_logging(const Config& config) {
  std::lock_guard<std::mutex> guard(configure_lock);
  std::shared_ptr<spdlog::logger> configured = logger_slot();
  if (!config.log_file.empty()) {
    try {
      auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(config.log_file, false);
      configured = std::make_shared<spdlog::logger>("tidepool", sink);
      configured->set_pattern("[%Y-%m-%d %H:%M:%S.%e] tidepool [%l] [pid %P] %v");
    } catch (const std::exception& e) {
      logger().warn("cannot open log_file '{}': {}; logging to stderr", config.log_file, e.what());
    }
  }
  configured->set_level(to_spdlog(config.log));
  configured->flush_on(spdlog::level::warn);
  logger_slot() = configured;
}

void flush_logging() noexcept {
  try {
    logger().flush();
  } catch (...) {
  }
}

}  // namespace tidepool::runtime
