// See launch_scan.hpp.
#include "residency/launch_scan.hpp"

#include <algorithm>
#include <mutex>

namespace tidepool::residency {

const LaunchScanner::Layout* LaunchScanner::layout_of(CUfunction function) {
  {
    std::shared_lock<std::shared_mutex> guard(lock_);
    auto it = layouts_.find(function);
    if (it != layouts_.end()) return it->second.sizes.empty() ? nullptr : &it->second;
  }
  Layout layout;
  if (api_.funcGetParamInfo != nullptr) {
    // The driver answers CUDA_ERROR_INVALID_VALUE past the last parameter.
    for (std::size_t i = 0; i < 4096; ++i) {
      std::size_t offset = 0;
      std::size_t size = 0;
      if (api_.funcGetParamInfo(function, i, &offset, &size) != CUDA_SUCCESS) break;
      layout.sizes.push_back(size);
      layout.bytes = std::max(layout.bytes, offset + size);
    }
  }
  std::unique_lock<std::shared_mutex> guard(lock_);
  auto [it, inserted] = layouts_.try_emplace(function, std::move(layout));
  return it->second.sizes.empty() ? nullptr : &it->second;
}

}  // namespace tidepool::residency
