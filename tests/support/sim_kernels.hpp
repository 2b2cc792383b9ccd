// Test support: a "kernel" for the sim that waits on a Gate before writing
// an int, so tests decide when stream work runs and can observe ordering.
#pragma once

#include <condition_variable>
#include <mutex>

#include "sim/sim_control.h"
#include "support/sim_driver.hpp"

namespace tidepool::testing {

// A gate a "kernel" waits on, so tests control when stream work runs.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  void release() {
    {
      std::lock_guard<std::mutex> g(m);
      open = true;
    }
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> g(m);
    cv.wait(g, [&] { return open; });
  }
};

inline void gated_write(void** params, void* /*user*/) {
  auto* gate = *static_cast<Gate**>(params[0]);
  auto* target = *static_cast<int**>(params[1]);
  const int value = *static_cast<int*>(params[2]);
  gate->wait();
  *target = value;
}

inline CUfunction gated_write_kernel() {
  static CUfunction f = [] {
    CUfunction fn = nullptr;
    const std::size_t sizes[] = {sizeof(Gate*), sizeof(int*), sizeof(int)};
    auto reg = sim_control<decltype(&tidepool_sim_register_kernel)>("tidepool_sim_register_kernel");
    EXPECT_EQ(reg(&fn, &gated_write, nullptr, 3, sizes), CUDA_SUCCESS);
    return fn;
  }();
  return f;
}

inline CUresult launch_gated_write(CUstream stream, Gate* gate, int* target, int value) {
  void* params[] = {&gate, &target, &value};
  return sim_driver().api().launchKernel(gated_write_kernel(), 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
}

}  // namespace tidepool::testing
