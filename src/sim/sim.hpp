// Shared state of the simulated driver. Every entry point takes `g.lock`
// (a recursive-free std::mutex) only around bookkeeping, never while waiting
// on stream work, so workers can always make progress.
//
// Device pointers are host addresses: device memory is host memory mapped
// at the addresses the sim hands out, so tests read and write it directly.
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sim/sim_control.h"

#define TIDEPOOL_SIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace tidepool::sim {

struct Context {
  int device = 0;
  int retain_count = 0;
};

class Stream;

// Where an event was recorded: complete when the stream finished `sequence`.
struct Event {
  std::shared_ptr<Stream> stream;
  std::uint64_t sequence = 0;
  std::atomic<std::int64_t> completed_at_ns{0};
  unsigned flags = 0;
};

class Stream : public std::enable_shared_from_this<Stream> {
 public:
  Stream(unsigned flags, bool legacy);
  ~Stream();
  // Enqueues work; returns its sequence number (1-based).
  std::uint64_t enqueue(std::function<void()> work);
  [[nodiscard]] std::uint64_t completed() const noexcept { return completed_.load(std::memory_order_acquire); }
  [[nodiscard]] std::uint64_t enqueued() const;
  void wait_for(std::uint64_t sequence) const;
  void synchronize() const { wait_for(enqueued()); }
  [[nodiscard]] bool blocking() const noexcept { return (flags_ & CU_STREAM_NON_BLOCKING) == 0; }
  [[nodiscard]] bool legacy() const noexcept { return legacy_; }
  void stop();
  std::atomic<int> capturing{0};

 private:
  void run();
  unsigned flags_;
  bool legacy_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t enqueued_ = 0;
  std::atomic<std::uint64_t> completed_{0};
  bool stopping_ = false;
  std::thread worker_;
};

struct Physical {
  int fd = -1;
  std::size_t size = 0;
  bool on_device = true;
  int maps = 0;
  bool released = false;
};

struct Mapping {
  std::size_t size = 0;
  Physical* physical = nullptr;
  std::size_t offset = 0;
  bool accessible = false;
};

enum class AllocationKind { device, host, managed };
struct Allocation {
  std::size_t size = 0;
  AllocationKind kind = AllocationKind::device;
  std::size_t pitch = 0;
};

struct Kernel {
  tidepool_sim_kernel_fn fn = nullptr;
  void* user_data = nullptr;
  std::vector<std::size_t> sizes;
  std::vector<std::size_t> offsets;
};

struct Fault {
  unsigned countdown = 0;
  CUresult result = CUDA_SUCCESS;
};

struct State {
  std::mutex lock;
  bool initialized = false;
  int device_count = 1;
  std::size_t capacity = 0;
  std::size_t granularity = 0;
  std::size_t device_used = 0;
  std::size_t host_used = 0;
  std::vector<std::unique_ptr<Context>> contexts;                  // primary context per device
  std::map<std::uintptr_t, Allocation> allocations;               // cuMemAlloc / host allocations by base
  std::map<std::uintptr_t, std::size_t> reservations;             // VA reservations by base
  std::map<std::uintptr_t, Mapping> mappings;                     // VMM mappings by base
  std::unordered_map<Physical*, std::unique_ptr<Physical>> physicals;
  std::unordered_map<Stream*, std::shared_ptr<Stream>> streams;   // created streams
  // Destroyed streams whose queued work has yet to finish: the driver
  // returns from cuStreamDestroy at once, and a context synchronisation
  // still waits for that work.
  std::vector<std::shared_ptr<Stream>> retiring;
  std::unordered_map<Event*, std::unique_ptr<Event>> events;
  std::unordered_map<Kernel*, std::unique_ptr<Kernel>> kernels;
  std::unordered_map<std::string, Fault> faults;
  std::unordered_map<std::string, std::uint64_t> calls;
  std::shared_ptr<Stream> legacy;
};

State& state();
// Counts a call of `name` and returns the injected result, or CUDA_SUCCESS.
CUresult enter(const char* name);
// CUDA_ERROR_NOT_INITIALIZED before cuInit, else the fault check.
CUresult enter_initialized(const char* name);
// The context current on this thread, or null.
Context*& current_context();
// The stream a handle names: null, CU_STREAM_LEGACY -> legacy; CU_STREAM_PER_THREAD
// -> this thread's stream. Null result for an unknown handle.
std::shared_ptr<Stream> resolve_stream(CUstream handle);
// Enqueues `work` on `stream` with legacy-stream ordering applied.
std::uint64_t submit(const std::shared_ptr<Stream>& stream, std::function<void()> work);
// Waits for all work on every stream.
void synchronize_all();
std::int64_t now_ns();

}  // namespace tidepool::sim
