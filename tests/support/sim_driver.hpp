// Test support: the simulated driver, opened once per test process through the
// same driver table tidepool uses, and a helper to reach the sim's control API.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <memory>

#include "driver/driver.hpp"

namespace tidepool::testing {

// The sim driver for this process. Fails the calling test when it cannot open.
inline const driver::Driver& sim_driver() {
  static std::unique_ptr<driver::Driver> driver = [] {
    auto opened = driver::Driver::open(TIDEPOOL_SIM_LIBRARY);
    if (!opened) {
      ADD_FAILURE() << "cannot open the sim driver at " << TIDEPOOL_SIM_LIBRARY << ": " << opened.status().message();
      return std::unique_ptr<driver::Driver>();
    }
    return std::move(opened.value());
  }();
  return *driver;
}

// A function of the sim's control API (sim/sim_control.h), by name.
template <typename Fn>
Fn sim_control(const char* name) {
  void* symbol = ::dlsym(sim_driver().handle(), name);
  if (symbol == nullptr) ADD_FAILURE() << "the sim does not export " << name;
  return reinterpret_cast<Fn>(symbol);
}

// A test run with device 0's primary context current (on the sim), made
// Device 1's primary context, retained (the caller releases device 1's), or
// null when the sim has one device (TIDEPOOL_SIM_DEVICES).
inline CUcontext second_device_context() {
  const driver::Api& api = sim_driver().api();
  int devices = 0;
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (api.deviceGetCount(&devices) != CUDA_SUCCESS || devices < 2 || api.deviceGet(&device, 1) != CUDA_SUCCESS ||
      api.devicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS) {
    return nullptr;
  }
  return context;
}

// current before each test and left after it, once the device is idle.
class WithPrimaryContext : public ::testing::Test {
 protected:
  void SetUp() override {
    const driver::Api& api = sim_driver().api();
    ASSERT_EQ(api.init(0), CUDA_SUCCESS);
    CUdevice device = 0;
    ASSERT_EQ(api.deviceGet(&device, 0), CUDA_SUCCESS);
    ASSERT_EQ(api.devicePrimaryCtxRetain(&context_, device), CUDA_SUCCESS);
    scope_ = std::make_unique<driver::ScopedContext>(api, context_);
  }
  void TearDown() override {
    (void)sim_driver().api().ctxSynchronize();
    scope_.reset();
  }
  CUcontext context_ = nullptr;
  std::unique_ptr<driver::ScopedContext> scope_;
};

}  // namespace tidepool::testing
