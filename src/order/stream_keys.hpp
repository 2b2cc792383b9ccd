// Stream keys: how the pool names the stream a block's pending work is on.
//
// Handles are keys, except that the legacy stream has one key (0) and
// CU_STREAM_PER_THREAD names a different stream in every thread: its key is
// the thread's own, an odd-looking value no real handle (a pointer) takes.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

namespace tidepool::order {

// The Block::stream value of a block no queued work can touch.
inline constexpr std::uintptr_t kNoPendingWork = ~std::uintptr_t{0};

// The Block::stream value of a block freed with cudaFree semantics and put
// back behind a device barrier (StreamRegistry::device_barrier): work queued
// before it may still run, but every stream's later work is ordered after
// that work, so any request may take the block at once. Only unmapping its
// pages waits, for a record on the legacy stream (which is behind the barrier).
// No stream handle takes this value: handles are pointers.
inline constexpr std::uintptr_t kAfterBarrier = 0x6;

namespace stream_keys {

inline constexpr std::uintptr_t kPerThreadTag = 0x2;
inline constexpr std::uintptr_t kTagMask = 0xf;

inline std::uintptr_t this_thread_key() {
  static std::atomic<std::uintptr_t> next_thread_key{1};
  thread_local const std::uintptr_t key = (next_thread_key.fetch_add(1) << 4) | kPerThreadTag;
  return key;
}

inline bool is_per_thread_key(std::uintptr_t key) { return key != kPerThreadTag && (key & kTagMask) == kPerThreadTag; }

inline std::uintptr_t stream_key(std::uintptr_t stream) {
  if (stream == reinterpret_cast<std::uintptr_t>(CU_STREAM_LEGACY)) return 0;
  if (stream == reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD)) return this_thread_key();
  return stream;
}

// The handle work of `key` can be fenced on from this thread. Another thread's
// per-thread stream cannot be named here; the legacy stream waits for all of
// its earlier work (it is a blocking stream), so a record there covers it.
inline CUstream fence_handle(std::uintptr_t key) {
  if (key == kAfterBarrier) return nullptr;
  if (is_per_thread_key(key)) return key == this_thread_key() ? CU_STREAM_PER_THREAD : nullptr;
  return reinterpret_cast<CUstream>(key);
}

}  // namespace stream_keys
}  // namespace tidepool::order
