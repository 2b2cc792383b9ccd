// LaunchScanner: the pool pointers a kernel launch passes, read from its
// parameter bytes.
//
// Each kernel's parameter layout is asked of the driver once
// (cuFuncGetParamInfo) and cached. A launch's parameters are then scanned
// word by word: every 8-byte-aligned word of every parameter, so that a
// struct passed by value still gives up the pointers it holds. Words are
// only candidates: the caller checks them against the pool's ranges, and a
// word that merely looks like a pool address marks a block used, which
// costs eviction order, never correctness.
//
// The scan never reads a byte the driver would not. The layout comes from
// cuFuncGetParamInfo, or cuKernelGetParamInfo for a library kernel's handle
// (what the CUDA runtime launches). A kernel whose layout the driver will
// not give is not scanned, and the caller is told so: such a launch may use
// any block. A launch
// through `extra` is scanned only when its CU_LAUNCH_PARAM_BUFFER_SIZE is
// exactly the layout's parameter bytes (the end of the last parameter): a
// buffer claiming more, or less, is the driver's to refuse, and a hook that
// read the claimed size could read past what the program gave. Both forms at
// once, a size without a buffer, or an unknown marker: not scanned either.
//
// Every launch looks its kernel up, from any thread: the layouts are found
// in a fixed table of atomic slots, read without a lock (a launch pays two
// loads, not a reader lock's two atomic writes). An entry, once published,
// is never changed or freed. Kernels the table has no room for (more than
// its probe window allows) are kept in a map under a lock.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "driver/driver.hpp"

namespace tidepool::residency {

class LaunchScanner {
 public:
  explicit LaunchScanner(const driver::Api& api) : api_(api) {}
  LaunchScanner(const LaunchScanner&) = delete;
  LaunchScanner& operator=(const LaunchScanner&) = delete;

  // Calls on_word(word) for every aligned 8-byte word of the launch's
  // parameters (kernelParams, or the CU_LAUNCH_PARAM_BUFFER_POINTER buffer
  // of `extra`). False when the parameters could not be read (the kernel is
  // not described, or `extra` is not a buffer the scan trusts): the launch
  // may name blocks no word showed.
  template <typename F>
  bool for_each_word(CUfunction function, void** params, void** extra, F&& on_word) {
    if (params != nullptr && extra != nullptr) return true;  // the driver refuses both forms at once: no launch
    if (params != nullptr) {
      const Layout* layout = layout_of(function);
      if (layout == nullptr) return false;
      for (std::size_t i = 0; i < layout->sizes.size(); ++i) {
        if (layout->sizes[i] == sizeof(std::uint64_t) && params[i] != nullptr) {  // a pointer or a scalar: most are
          std::uint64_t word = 0;
          std::memcpy(&word, params[i], sizeof(word));
          on_word(static_cast<std::uintptr_t>(word));
        } else {
          scan(params[i], layout->sizes[i], on_word);
        }
      }
      return true;
    }
    if (extra == nullptr) return true;  // no parameters: nothing to name
    std::size_t size = 0;
    const void* buffer = packed_buffer(extra, &size);
    if (buffer == nullptr) return false;
    const Layout* layout = layout_of(function);
    if (layout == nullptr || size != layout->bytes) return false;
    scan(buffer, size, on_word);
    return true;
  }

 private:
  static constexpr std::size_t kMaxExtraEntries = 16;  // the driver knows three markers; more is not a real launch
  // The buffer and claimed size of an `extra` array, or null when the array
  // is not one the scan trusts (see the top of this file).
  static const void* packed_buffer(void** extra, std::size_t* size) {
    const void* buffer = nullptr;
    const void* size_at = nullptr;
    std::size_t i = 0;
    for (; i < kMaxExtraEntries && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buffer = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        size_at = extra[i + 1];
      } else {
        return nullptr;
      }
    }
    if (i >= kMaxExtraEntries || buffer == nullptr || size_at == nullptr) return nullptr;
    std::memcpy(size, size_at, sizeof(*size));
    return buffer;
  }

  struct Layout {
    std::vector<std::size_t> sizes;
    std::size_t bytes = 0;   // the packed buffer's size: the end of the last parameter
    bool described = false;  // the driver gave the layout (a kernel may have no parameters)
  };
  template <typename F>
  static void scan(const void* bytes, std::size_t size, F& on_word) {
    if (bytes == nullptr) return;
    const auto* p = static_cast<const unsigned char*>(bytes);
    for (std::size_t at = 0; at + sizeof(std::uint64_t) <= size; at += sizeof(std::uint64_t)) {
      std::uint64_t word = 0;
      std::memcpy(&word, p + at, sizeof(word));
      on_word(static_cast<std::uintptr_t>(word));
    }
  }
  struct Entry {
    CUfunction function;
    Layout layout;
  };
  static constexpr std::size_t kSlots = 4096;  // a power of two; a training run launches hundreds of kernels
  static constexpr std::size_t kProbes = 16;   // slots tried from a kernel's home before the map

  // Null when the driver does not describe the kernel.
  const Layout* layout_of(CUfunction function) {
    const std::size_t home = slot_of(function);
    for (std::size_t i = 0; i < kProbes; ++i) {
      const Entry* e = slots_[(home + i) & (kSlots - 1)].load(std::memory_order_acquire);
      if (e == nullptr) break;
      if (e->function == function) return e->layout.described ? &e->layout : nullptr;
    }
    return learn(function);
  }
  static std::size_t slot_of(CUfunction function) noexcept {
    // Handles are heap addresses: the low bits are alignment, the rest mixed.
    const auto bits = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(function));
    return static_cast<std::size_t>((bits * 0x9E3779B97F4A7C15ULL) >> 52);  // the top 12 bits: kSlots
  }
  // The first sight of a kernel (or one only the map holds): asks the
  // driver, publishes the entry. Never erased, so a pointer stays valid.
  const Layout* learn(CUfunction function);

  const driver::Api& api_;
  std::array<std::atomic<const Entry*>, kSlots> slots_{};
  std::mutex lock_;            // writers of slots_; entries_ and spilled_
  std::deque<Entry> entries_;  // owns every entry; a deque never moves one
  std::unordered_map<CUfunction, const Entry*> spilled_;
};

}  // namespace tidepool::residency
