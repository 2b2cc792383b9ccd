// HostTime: adds the wall time of a scope to a running total in
// milliseconds. For figures a report gives of where a thread's time went
// (waiting on the device, remapping pages, pinning), never for decisions.
#pragma once

#include <chrono>

namespace tidepool::util {

class HostTime {
 public:
  explicit HostTime(double* total_ms) noexcept : total_ms_(total_ms), start_(std::chrono::steady_clock::now()) {}
  ~HostTime() {
    *total_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }
  HostTime(const HostTime&) = delete;
  HostTime& operator=(const HostTime&) = delete;

 private:
  double* total_ms_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tidepool::util
