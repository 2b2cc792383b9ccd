// Test support: a primary context with two non-blocking streams, a complete
// stream registry that knows them, and the order layer's fences over them,
// for tests of what is decided by how far a stream's work has run.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "order/order.hpp"
#include "support/sim_driver.hpp"

namespace tidepool::testing {

class WithStreamFences : public WithPrimaryContext {
 protected:
  static const driver::Api& api() { return sim_driver().api(); }
  static std::uintptr_t key_of(CUstream s) { return reinterpret_cast<std::uintptr_t>(s); }

  void SetUp() override {
    WithPrimaryContext::SetUp();
    for (CUstream* s : {&first_, &second_}) {
      ASSERT_EQ(api().streamCreate(s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
      registry_.created(*s);
    }
    registry_.set_complete(true);
    // After the base's SetUp: the fences belong to its context.
    fences_ = std::make_unique<order::StreamFences>(api(), context_, registry_, events_, barriers_);
  }
  void TearDown() override {
    (void)api().ctxSynchronize();
    fences_.reset();
    barriers_.clear();
    for (CUstream s : {first_, second_}) {
      (void)registry_.destroying(s);
      (void)api().streamDestroy(s);
    }
    events_.clear();
    WithPrimaryContext::TearDown();
  }

  order::StreamRegistry registry_{api()};
  order::EventCache events_{api()};
  order::BarrierFences barriers_{api(), events_};
  std::unique_ptr<order::StreamFences> fences_;
  CUstream first_ = nullptr;
  CUstream second_ = nullptr;
};

}  // namespace tidepool::testing
