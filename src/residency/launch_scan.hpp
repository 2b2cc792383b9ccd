// LaunchScanner: the pool pointers a kernel launch passes, read from its
// parameter bytes.
//
// Each kernel's parameter layout is asked of the driver once
// (cuFuncGetParamInfo) and cached. A launch's parameters are then scanned
// word by word: every 8-byte-aligned word of every parameter, so that a
// struct passed by value still gives up the pointers it holds. Words are
// only candidates: the caller checks them against the pool's ranges, and a
// word that merely looks like a pool address marks a block used, which
// costs eviction order, never correctness. A kernel whose layout the driver
// will not give (no cuFuncGetParamInfo, a launch through `extra` without a
// buffer) is not scanned.
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
    if (params != nullptr) {
      const Layout* layout = layout_of(function);
      if (layout == nullptr) return;
      for (std::size_t i = 0; i < layout->sizes.size(); ++i) {
        scan(params[i], layout->sizes[i], on_word);
      }
      return;
    }
    if (extra == nullptr) return;
    const void* buffer = nullptr;
    std::size_t size = 0;
    for (std::size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END && i < 64; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = extra[i + 1];
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != nullptr) {
        std::memcpy(&size, extra[i + 1], sizeof(size));
      }
    }
    scan(buffer, size, on_word);
  }

 private:
  struct Layout {
    std::vector<std::size_t> sizes;
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
