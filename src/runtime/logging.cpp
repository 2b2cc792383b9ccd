// The logger's construction and configuration.
#include "runtime/logging.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <new>

#include "util/util.hpp"

namespace tidepool::runtime {

namespace {

std::mutex configure_lock;

// log_file: appended to through a descriptor opened as every output file is
// (util/output_file.hpp); spdlog's own file sink follows links and creates
// directories.
class FileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FileSink(int fd) : fd_(fd) {}
  ~FileSink() override { ::close(fd_); }
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

 protected:
  void sink_it_(const spdlog::details::log_msg& message) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(message, formatted);
    const char* data = formatted.data();
    std::size_t left = formatted.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // a full disk loses log lines, never the host's work
      data += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  void flush_() override {}

 private:
  int fd_;
};

std::shared_ptr<spdlog::logger> make_stderr_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto created = std::make_shared<spdlog::logger>("tidepool", sink);
  created->set_pattern("tidepool [%l] %v");
  created->set_level(spdlog::level::warn);
  created->flush_on(spdlog::level::warn);
  return created;
}

using LoggerSlot = std::shared_ptr<spdlog::logger>;

// Never destroyed at exit, like the Runtime: logging may happen during the
// host's static destruction. It lives in static storage rather than on the
// heap, so that unloading the library (shutdown_logging) leaves nothing.
LoggerSlot& logger_slot() {
  alignas(LoggerSlot) static unsigned char storage[sizeof(LoggerSlot)];
  static LoggerSlot* const slot = new (storage) LoggerSlot(make_stderr_logger());
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
    auto opened = util::open_output_file(config.log_file, util::OutputMode::append);
    if (opened) {
      configured = std::make_shared<spdlog::logger>("tidepool", std::make_shared<FileSink>(opened.value()));
      configured->set_pattern("[%Y-%m-%d %H:%M:%S.%e] tidepool [%l] [pid %P] %v");
    } else {
      logger().warn("cannot open log_file '{}': {}; logging to stderr", config.log_file, opened.status().message());
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

void shutdown_logging() noexcept {
  flush_logging();
  std::lock_guard<std::mutex> guard(configure_lock);
  // Nothing of the library runs after this but its own static destructors,
  // which do not log.
  logger_slot().reset();
}

}  // namespace tidepool::runtime
