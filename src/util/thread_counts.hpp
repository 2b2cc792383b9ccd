// ThreadCounts: counters that many threads add to on a hot path and that are
// read rarely (a report). Each thread adds to a slot of its own, on its own
// cache line, with a plain load and store: no atomic read-modify-write, no
// line shared between threads. A read sums the slots.
//
// A thread takes a slot at its first add and keeps it for good (a slot's
// counts outlive its thread). The threads past the first kOwnSlots share
// one last slot, and add to it with fetch_add: still exact, only slower.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tidepool::util {

template <std::size_t kCounters>
class ThreadCounts {
 public:
  // The calling thread's counters: taken once for several adds.
  class Mine {
   public:
    void add(std::size_t counter) noexcept {
      std::atomic<std::uint64_t>& count = (*counts_)[counter];
      if (shared_) {
        count.fetch_add(1, std::memory_order_relaxed);
      } else {
        // This thread is the slot's only writer.
        count.store(count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      }
    }

   private:
    friend class ThreadCounts;
    Mine(std::array<std::atomic<std::uint64_t>, kCounters>* counts, bool shared) : counts_(counts), shared_(shared) {}
    std::array<std::atomic<std::uint64_t>, kCounters>* counts_;
    bool shared_;
  };

  [[nodiscard]] Mine mine() noexcept {
    const std::size_t slot = thread_slot();
    return Mine(&slots_[slot].counts, slot == kOwnSlots);
  }

  [[nodiscard]] std::uint64_t total(std::size_t counter) const noexcept {
    std::uint64_t sum = 0;
    for (const Slot& s : slots_) sum += s.counts[counter].load(std::memory_order_relaxed);
    return sum;
  }

  static constexpr std::size_t kOwnSlots = 127;

 private:
  // Numbered once per thread, for every ThreadCounts of this kCounters
  // alike. Constant-initialised, so that a read is one TLS access and no
  // guard.
  static std::size_t thread_slot() noexcept {
    thread_local std::size_t slot_plus_one = 0;
    if (slot_plus_one == 0) [[unlikely]] {
      static std::atomic<std::size_t> next{0};
      slot_plus_one = std::min(next.fetch_add(1, std::memory_order_relaxed), kOwnSlots) + 1;
    }
    return slot_plus_one - 1;
  }

  struct alignas(64) Slot {
    std::array<std::atomic<std::uint64_t>, kCounters> counts{};
  };
  std::array<Slot, kOwnSlots + 1> slots_{};
};

}  // namespace tidepool::util
