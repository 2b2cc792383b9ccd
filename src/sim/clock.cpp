// The virtual clock: device time that moves only when the host moves it or
// waits, for tools that model a device lagging the host (tidepool-replay's
// --lag-us) and need the same answers on every run.
//
// Off by default; on, a kernel that calls tidepool_sim_run_for holds its
// stream until the clock reaches the kernel's end: the stream's device time
// (when its previous item ended, or when this one was queued, if later) plus
// the kernel's duration. Anything that looks at the device's progress from
// the host (cuEventQuery, cuStreamQuery) first lets every stream run until
// it is quiet: its queue empty, or its worker waiting for the clock or for
// another stream's unfinished work. A host wait (a synchronisation, a full
// queue) moves the clock to each next kernel end in turn until what it waits
// for is done, as the device would get there. So which work is done when the
// host looks depends on the clock alone, not on how the threads ran.
//
// A worker blocked on anything else never becomes quiet: a stream memory
// wait (cuStreamWaitValue32, whoever writes the value), a host function that
// blocks, or a wait begun before the clock was turned on. A tool using the
// clock must not queue such work; if it does, a host look gives up waiting
// after 10 s without progress and says so once on stderr. Event timestamps
// (cuEventElapsedTime) and the copy bandwidth's delays stay in wall time and
// never move the clock.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>

#include "sim/sim.hpp"

namespace tidepool::sim {

Stream*& worker_stream() {
  thread_local Stream* stream = nullptr;
  return stream;
}

Stream* Stream::of_this_thread() noexcept { return worker_stream(); }

bool Stream::quiet() const {
  std::lock_guard<std::mutex> guard(mutex_);
  if (waiting_on_ != nullptr) return waiting_on_->completed() < waiting_for_;
  const std::uint64_t end = clock_wait_end();
  if (end != 0) return end > state().clock_ns.load(std::memory_order_acquire);
  return queue_.empty() && !running_.load(std::memory_order_acquire);
}

void Stream::run_for(std::uint64_t ns) {
  State& s = state();
  if (!s.virtual_clock.load(std::memory_order_acquire)) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
    while (std::chrono::steady_clock::now() < until) {
    }
    return;
  }
  device_ns_ += ns;
  const std::uint64_t end = device_ns_;
  std::unique_lock<std::mutex> guard(s.clock_lock);
  if (s.clock_ns.load(std::memory_order_acquire) >= end) return;
  clock_wait_end_.store(end, std::memory_order_release);
  s.clock_moved.wait(guard, [&] {
    return s.clock_ns.load(std::memory_order_acquire) >= end || !s.virtual_clock.load(std::memory_order_acquire);
  });
  clock_wait_end_.store(0, std::memory_order_release);
}

void settle_streams() {
  State& s = state();
  if (!s.virtual_clock.load(std::memory_order_acquire) || Stream::of_this_thread() != nullptr) return;
  // A worker blocked on anything else (a stream memory wait, a host function
  // that waits on the host) is never quiet: after this long with no item
  // completed anywhere the host looks anyway, as in wall time, and says so
  // once, rather than hang the program.
  constexpr auto kStuck = std::chrono::seconds(10);
  std::uint64_t seen = s.completions.load(std::memory_order_acquire);
  auto progressed_at = std::chrono::steady_clock::now();
  for (;;) {
    // Quiet streams stay quiet until an item completes somewhere: seeing
    // every stream quiet with no completion meanwhile is seeing one moment.
    const std::uint64_t before = s.completions.load(std::memory_order_acquire);
    const std::vector<std::shared_ptr<Stream>> all = streams_of(nullptr);
    const bool quiet = std::all_of(all.begin(), all.end(), [](const auto& stream) { return stream->quiet(); });
    if (quiet && s.completions.load(std::memory_order_acquire) == before) return;
    const auto now = std::chrono::steady_clock::now();
    if (before != seen) {
      seen = before;
      progressed_at = now;
    } else if (now - progressed_at > kStuck) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true)) {
        std::fputs(
            "tidepool sim: virtual clock: a stream is blocked on neither the clock nor another stream; "
            "the host looks without waiting for it\n",
            stderr);
      }
      return;
    }
    std::this_thread::yield();
  }
}

bool advance_until(const std::function<bool()>& done) {
  State& s = state();
  if (!s.virtual_clock.load(std::memory_order_acquire) || Stream::of_this_thread() != nullptr) return false;
  for (;;) {
    settle_streams();
    if (done()) return true;
    const std::uint64_t now = s.clock_ns.load(std::memory_order_acquire);
    std::uint64_t next = std::numeric_limits<std::uint64_t>::max();
    for (const auto& stream : streams_of(nullptr)) {
      const std::uint64_t end = stream->clock_wait_end();
      if (end > now) next = std::min(next, end);
    }
    if (next == std::numeric_limits<std::uint64_t>::max()) return false;  // nothing the clock holds
    {
      std::lock_guard<std::mutex> guard(s.clock_lock);
      s.clock_ns.store(std::max(next, s.clock_ns.load(std::memory_order_acquire)), std::memory_order_release);
    }
    s.clock_moved.notify_all();
  }
}

}  // namespace tidepool::sim

using namespace tidepool::sim;  // NOLINT(google-build-using-namespace): exported C entry points below

TIDEPOOL_SIM_EXPORT void tidepool_sim_set_virtual_clock(int on) {
  State& s = state();
  {
    std::lock_guard<std::mutex> guard(s.clock_lock);
    s.virtual_clock.store(on != 0, std::memory_order_release);
  }
  s.clock_moved.notify_all();
}

TIDEPOOL_SIM_EXPORT void tidepool_sim_advance_clock(uint64_t ns) {
  State& s = state();
  {
    std::lock_guard<std::mutex> guard(s.clock_lock);
    s.clock_ns.store(s.clock_ns.load(std::memory_order_acquire) + ns, std::memory_order_release);
  }
  s.clock_moved.notify_all();
}

TIDEPOOL_SIM_EXPORT uint64_t tidepool_sim_clock_ns(void) { return state().clock_ns.load(std::memory_order_acquire); }

TIDEPOOL_SIM_EXPORT CUresult tidepool_sim_run_for(uint64_t ns) {
  Stream* stream = Stream::of_this_thread();
  if (stream == nullptr) return CUDA_ERROR_INVALID_CONTEXT;  // not in work a stream runs
  stream->run_for(ns);
  return CUDA_SUCCESS;
}
