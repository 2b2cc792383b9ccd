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
// The scan never reads a byte the driver would not. A kernel whose layout
// the driver will not give (no cuFuncGetParamInfo) is not scanned. A launch
// through `extra` is scanned only when its CU_LAUNCH_PARAM_BUFFER_SIZE is
// exactly the layout's parameter bytes (the end of the last parameter): a
// buffer claiming more, or less, is the driver's to refuse, and a hook that
// read the claimed size could read past what the program gave. Both forms at
// once, a size without a buffer, or an unknown marker: not scanned either.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <shared_mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "driver/driver.hpp"

namespace tidepool::residency {

class LaunchScanner {
 public:
  explicit LaunchScanner(const driver::Api& api) : api_(api) {}

  // Calls on_word(word) for every aligned 8-byte word of the launch's
  // parameters (kernelParams, or the CU_LAUNCH_PARAM_BUFFER_POINTER buffer
  // of `extra`).
  template <typename F>
  void for_each_word(CUfunction function, void** params, void** extra, F&& on_word) {
    if (params != nullptr && extra != nullptr) return;  // the driver refuses both forms at once
    if (params != nullptr) {
      const Layout* layout = layout_of(function);
      if (layout == nullptr) return;
      for (std::size_t i = 0; i < layout->sizes.size(); ++i) {
        scan(params[i], layout->sizes[i], on_word);
      }
      return;
    }
    if (extra == nullptr) return;
    std::size_t size = 0;
    const void* buffer = packed_buffer(extra, &size);
    if (buffer == nullptr) return;
    const Layout* layout = layout_of(function);
    if (layout == nullptr || size != layout->bytes) return;
    scan(buffer, size, on_word);
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
    std::size_t bytes = 0;  // the packed buffer's size: the end of the last parameter
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
  // Null when the driver does not describe the kernel. Entries are never
  // erased, so a pointer stays valid.
  const Layout* layout_of(CUfunction function);

  const driver::Api& api_;
  std::shared_mutex lock_;
  std::unordered_map<CUfunction, Layout> layouts_;
};

}  // namespace tidepool::residency
