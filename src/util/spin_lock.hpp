// SpinLock: a test-and-test-and-set lock for critical sections of a few dozen
// nanoseconds (the pool's tree lookups). It never calls into the kernel on the
// uncontended path and yields the CPU after a short spin so that a preempted
// holder can finish. Satisfies Lockable, so std::lock_guard works with it.
// try_lock_until is for the few paths that must never wait forever.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace tidepool::util {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class SpinLock {
 public:
  void lock() noexcept {
    for (;;) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      int spins = 0;
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins > 64) {
          std::this_thread::yield();
          spins = 0;
        } else {
          cpu_relax();
        }
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// Tries `lock` until `deadline`; false when the deadline came first. For
// paths that must end whatever another frame holds: at exit, a signal
// handler may have interrupted the very thread that holds the lock.
template <typename Lockable>
bool try_lock_until(Lockable& lock, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    if (lock.try_lock()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace tidepool::util
