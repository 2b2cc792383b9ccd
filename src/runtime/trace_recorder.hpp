// TraceRecorder: records every allocation event of a run as RMM logging CSV
// (`trace:PATH`), off the hot path.
//
// Allocating threads push fixed-size events into a bounded lock-free ring
// (one atomic fetch-add and a slot write, no allocation, no I/O). A writer
// thread drains the ring every few milliseconds, formats lines and writes
// them with buffered stdio, so the file trails the program by at most one
// drain interval. flush() drains synchronously; it runs at exit. When the
// ring is full, producers wait for the writer rather than drop an event: a
// trace with a lost allocation could not be replayed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/trace_format.hpp"
#include "util/status.hpp"

namespace tidepool::runtime {

class TraceRecorder {
 public:
  static util::Result<std::unique_ptr<TraceRecorder>> open(const std::string& path);
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  void record(TraceAction action, std::uintptr_t pointer, std::size_t size, std::uintptr_t stream) noexcept;
  // Writes everything recorded so far and flushes the file.
  void flush() noexcept;
  [[nodiscard]] std::uint64_t recorded() const noexcept { return head_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    std::atomic<std::uint64_t> ready{0};  // sequence + 1 once the event is written
    TraceEvent event;
  };
  static constexpr std::size_t kCapacity = 1 << 16;

  explicit TraceRecorder(std::FILE* file);
  void run();
  void drain() noexcept;

  std::FILE* file_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<std::uint64_t> head_{0};  // next sequence to claim
  std::uint64_t tail_ = 0;              // next sequence to write; writer-owned (under drain_lock_)
  std::mutex drain_lock_;
  std::mutex wake_lock_;
  std::condition_variable wake_;
  std::atomic<bool> stop_{false};
  std::chrono::steady_clock::time_point start_;
  std::thread writer_;
};

}  // namespace tidepool::runtime
