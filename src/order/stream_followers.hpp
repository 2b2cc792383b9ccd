// StreamFollowers: the non-blocking streams a device barrier may leave to
// catch up with it at their next submission.
//
// A barrier orders every stream's earlier work before its event and every
// stream's later work after it. For a stream with nothing queued since a
// barrier last joined it, the first half is already done; the second can
// wait until the stream's next submission, which the preload's hooks
// announce before the driver queues it (StreamRegistry::using_stream). A
// barrier then costs one record on the legacy stream however many idle
// streams the program keeps, and a stream that submits between barriers
// pays one wait, at its first submission after them. This rests on the
// hooks seeing every submission, as legacy_only and eviction's pins do; the
// registry follows submissions only where the preload says they are seen.
//
// A tracked stream is a slot of a fixed open-addressed table, read without a
// lock on every submission; slots are claimed and given up under the
// registry's creation lock. A stream that finds no slot (the table full, or
// its probe run too long) is untracked: barriers join it and make it wait
// every time, as they do without this table.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tidepool::order {

class StreamFollowers {
 public:
  struct Slot {
    std::atomic<CUstream> stream{nullptr};  // null: never used; gone(): given up
    // Work may have been queued since a barrier last joined the stream.
    // Set after each submission returns (StreamRegistry::submitted), so that one queued
    // behind a barrier's join is never lost to that barrier clearing it.
    std::atomic<bool> unjoined{true};
    // The context's barrier generation the stream's queue already waits behind.
    std::atomic<std::uint64_t> followed{0};
    // The generation of the stream's context's barrier: owned by the
    // registry, stable for the process. Written before `stream` is published.
    const std::atomic<std::uint64_t>* generation = nullptr;
    CUcontext context = nullptr;
  };
  static constexpr std::size_t kSlots = 256;
  static constexpr std::size_t kProbes = 16;

  // The slot of a tracked stream, or null.
  [[nodiscard]] Slot* find(CUstream stream) noexcept {
    std::size_t i = home(stream);
    for (std::size_t n = 0; n < kProbes; ++n, i = (i + 1) % kSlots) {
      const CUstream held = slots_[i].stream.load(std::memory_order_acquire);
      if (held == stream) return &slots_[i];
      if (held == nullptr) return nullptr;
    }
    return nullptr;
  }
  // Tracks `stream` of `context` as having queued work and waiting behind
  // `followed`; null when no slot is free within its probe run. A handle
  // tracked before in another context (reused after its stream died
  // unseen) gets a fresh slot. Under the registry's creation lock.
  Slot* track(CUstream stream, CUcontext context, const std::atomic<std::uint64_t>* generation,
              std::uint64_t followed) noexcept;
  // Under the registry's creation lock.
  void forget(CUstream stream) noexcept;

 private:
  static std::size_t home(CUstream stream) noexcept {
    // Handles are aligned pointers: mix the bits above the alignment.
    const auto bits = reinterpret_cast<std::uintptr_t>(stream) >> 4;
    return static_cast<std::size_t>((bits * 0x9E3779B97F4A7C15ULL) >> 56) % kSlots;
  }
  static CUstream gone() noexcept { return reinterpret_cast<CUstream>(~std::uintptr_t{0}); }
  std::array<Slot, kSlots> slots_{};
};

}  // namespace tidepool::order
