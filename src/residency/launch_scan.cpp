// See launch_scan.hpp.
#include "residency/launch_scan.hpp"

#include <algorithm>
#include <mutex>
#include <utility>

namespace tidepool::residency {

const LaunchScanner::Layout* LaunchScanner::learn(CUfunction function) {
  std::lock_guard<std::mutex> guard(lock_);
  const auto answer = [](const Entry* e) { return e->layout.described ? &e->layout : nullptr; };
  // Another thread may have published it since the lock-free look.
  const std::size_t home = slot_of(function);
  std::atomic<const Entry*>* free_slot = nullptr;
  for (std::size_t i = 0; i < kProbes; ++i) {
    std::atomic<const Entry*>& slot = slots_[(home + i) & (kSlots - 1)];
    const Entry* e = slot.load(std::memory_order_relaxed);
    if (e == nullptr) {
      free_slot = &slot;
      break;
    }
    if (e->function == function) return answer(e);
  }
  if (auto it = spilled_.find(function); it != spilled_.end()) return answer(it->second);

  Layout layout;
  // A runtime (CUDA 12 on) launches the context-less kernels it gets from
  // cuLibraryGetKernel, their CUkernel handles cast to CUfunction: only
  // cuKernelGetParamInfo describes those.
  const auto read = [&](auto query) {
    // The driver answers CUDA_ERROR_INVALID_VALUE past the last parameter.
    for (std::size_t i = 0; i < 4096; ++i) {
      std::size_t offset = 0;
      std::size_t size = 0;
      const CUresult r = query(i, &offset, &size);
      if (r != CUDA_SUCCESS) {
        // Only the answer past the last parameter ends a layout; any other
        // error leaves it unknown, never a prefix taken for the whole.
        layout.described = r == CUDA_ERROR_INVALID_VALUE;
        if (!layout.described) {
          layout.sizes.clear();
          layout.bytes = 0;
        }
        return;
      }
      layout.sizes.push_back(size);
      layout.bytes = std::max(layout.bytes, offset + size);
    }
    layout.described = true;
  };
  if (api_.funcGetParamInfo != nullptr) {
    read([&](std::size_t i, std::size_t* offset, std::size_t* size) {
      return api_.funcGetParamInfo(function, i, offset, size);
    });
  }
  if (layout.sizes.empty() && api_.kernelGetParamInfo != nullptr) {
    const bool no_parameters = layout.described;
    read([&](std::size_t i, std::size_t* offset, std::size_t* size) {
      return api_.kernelGetParamInfo(reinterpret_cast<CUkernel>(function), i, offset, size);
    });
    layout.described = layout.described || no_parameters;
  }
  const Entry& entry = entries_.emplace_back(Entry{function, std::move(layout)});
  if (free_slot != nullptr) {
    free_slot->store(&entry, std::memory_order_release);  // the entry is whole before it is seen
  } else {
    spilled_.emplace(function, &entry);
  }
  return answer(&entry);
}

}  // namespace tidepool::residency
