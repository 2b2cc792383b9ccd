// tests/gpu: an Allocator on the real driver (libcuda.so.1, or TIDEPOOL_CUDA_LIB).
// Skips when no driver answers. Otherwise, on device 0: a stream-ordered and a
// cudaFree-style allocate/free round trip, each filled with cuMemsetD8 and read
// back with cuMemcpyDtoH, so no kernel is needed. Shipped in the GPU bundle.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "driver/driver.hpp"
#include "runtime/allocator.hpp"

namespace tidepool {
namespace {

class RealDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = driver::Driver::open(driver::default_driver_path());
    if (!opened.ok()) GTEST_SKIP() << "no driver: " << opened.status().message();
    driver_ = std::move(opened.value());
    const driver::Api& api = driver_->api();
    int count = 0;
    if (api.init(0) != CUDA_SUCCESS || api.deviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
      GTEST_SKIP() << "the driver at " << driver_->path() << " has no device";
    }
    auto created = runtime::Allocator::create(*driver_, runtime::AllocatorOptions{});
    ASSERT_TRUE(created.ok()) << created.status().message();
    allocator_ = std::move(created.value());
    scope_ = std::make_unique<driver::ScopedContext>(api, allocator_->context());
  }
  void TearDown() override {
    scope_.reset();
    allocator_.reset();
  }

  // Fills [address, address + size) with `value` (on `stream` when non-null)
  // and checks every byte read back.
  void fill_and_check(std::uintptr_t address, std::size_t size, unsigned char value, CUstream stream) {
    const driver::Api& api = driver_->api();
    const auto dptr = static_cast<CUdeviceptr>(address);
    if (stream != nullptr) {
      ASSERT_EQ(api.memsetD8Async(dptr, value, size, stream), CUDA_SUCCESS);
      ASSERT_EQ(api.streamSynchronize(stream), CUDA_SUCCESS);
    } else {
      ASSERT_EQ(api.memsetD8(dptr, value, size), CUDA_SUCCESS);
    }
    std::vector<unsigned char> host(size, static_cast<unsigned char>(~value));
    ASSERT_EQ(api.memcpyDtoH(host.data(), dptr, size), CUDA_SUCCESS);
    std::size_t wrong = 0;
    for (unsigned char byte : host) wrong += byte != value ? 1 : 0;
    EXPECT_EQ(wrong, 0u) << "bytes that did not read back as written";
  }

  std::unique_ptr<driver::Driver> driver_;
  std::unique_ptr<runtime::Allocator> allocator_;
  std::unique_ptr<driver::ScopedContext> scope_;
};

TEST_F(RealDriver, StreamOrderedRoundTrip) {
  const driver::Api& api = driver_->api();
  CUstream stream = nullptr;
  ASSERT_EQ(api.streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  allocator_->stream_created(stream);
  const auto handle = reinterpret_cast<std::uintptr_t>(stream);
  for (unsigned char value : {0x5a, 0xc3}) {  // the second round reuses the freed block
    for (std::size_t size : {std::size_t{4096}, std::size_t{3} << 20}) {
      auto block = allocator_->allocate(size, handle, true);
      ASSERT_TRUE(block.ok()) << block.status().message();
      fill_and_check(block.value(), size, value, stream);
      ASSERT_TRUE(allocator_->deallocate(block.value(), handle, true).ok());
    }
  }
  ASSERT_EQ(api.streamSynchronize(stream), CUDA_SUCCESS);
  allocator_->stream_destroying(stream);
  EXPECT_EQ(api.streamDestroy(stream), CUDA_SUCCESS);
}

TEST_F(RealDriver, CudaFreeStyleRoundTrip) {
  for (unsigned char value : {0x11, 0xee}) {
    for (std::size_t size : {std::size_t{512}, std::size_t{5} << 20}) {
      auto block = allocator_->allocate(size, 0, false);
      ASSERT_TRUE(block.ok()) << block.status().message();
      fill_and_check(block.value(), size, value, nullptr);
      ASSERT_TRUE(allocator_->deallocate(block.value(), 0, false).ok());
    }
  }
}

}  // namespace
}  // namespace tidepool
