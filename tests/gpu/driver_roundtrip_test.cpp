// tests/gpu: an Allocator on the real driver (libcuda.so.1, or TIDEPOOL_CUDA_LIB).
// Skips when no driver answers. Otherwise, on device 0: a stream-ordered and a
// cudaFree-style allocate/free round trip, each filled with cuMemsetD8 and read
// back with cuMemcpyDtoH, so no kernel is needed. Shipped in the GPU bundle.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "driver/driver.hpp"
#include "runtime/allocator.hpp"
#include "support/codec_roundtrip.hpp"

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

// tidepool's compression kernels on the GPU, byte for byte against the host
// reference the sim runs in their place, on 2 MiB pages of random, sparse
// and half-zero data at both granularities.
TEST_F(RealDriver, CompressionKernelsMatchTheSimsReferenceByteForByte) {
  if (kernels::image().empty()) GTEST_SKIP() << "built without nvcc: no kernels";
  testing::codec_round_trip(*driver_, allocator_->context(), 2 << 20);
}

// Their throughput, printed for the GPU bundle's log: the pack reads device
// memory and writes the stream straight to pinned host memory, the unpack
// the other way, so each is bounded by the host link (about 55 GB/s on an
// H100's PCIe 5) and must not be far below it.
TEST_F(RealDriver, CompressionKernelsKeepUpWithTheHostLink) {
  if (kernels::image().empty()) GTEST_SKIP() << "built without nvcc: no kernels";
  const driver::Api& api = driver_->api();
  constexpr std::size_t kPage = 2 << 20;
  constexpr std::size_t kPages = residency::PageCodec::kBatch;
  auto created = residency::PageCodec::create(*driver_, allocator_->context(), kPage);
  ASSERT_TRUE(created.ok()) << created.status().message();
  residency::PageCodec& codec = *created.value();
  CUdeviceptr pages = 0;
  ASSERT_EQ(api.memAlloc(&pages, kPages * kPage), CUDA_SUCCESS);
  const std::vector<unsigned char> data = testing::page_bytes(testing::PageData::half_zero32, kPage, 1);
  std::vector<CUdeviceptr> at(kPages);
  for (std::size_t i = 0; i < kPages; ++i) {
    at[i] = pages + i * kPage;
    ASSERT_EQ(api.memcpyHtoD(at[i], data.data(), kPage), CUDA_SUCCESS);
  }
  const std::size_t room = kernels::max_stream_bytes(codec.chunks());
  void* host = nullptr;
  ASSERT_EQ(api.memHostAlloc(&host, kPages * room, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  CUdeviceptr streams = 0;
  ASSERT_EQ(api.memHostGetDevicePointer(&streams, host, 0), CUDA_SUCCESS);
  CUevent start = nullptr;
  CUevent end = nullptr;
  ASSERT_EQ(api.eventCreate(&start, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(api.eventCreate(&end, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_TRUE(codec.count(at.data(), kPages, 1, nullptr));  // a first launch loads the module's code
  ASSERT_EQ(api.ctxSynchronize(), CUDA_SUCCESS);
  const auto timed = [&](auto&& work) {
    EXPECT_EQ(api.eventRecord(start, nullptr), CUDA_SUCCESS);
    work();
    EXPECT_EQ(api.eventRecord(end, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(api.eventSynchronize(end), CUDA_SUCCESS);
    float ms = 0;
    EXPECT_EQ(api.eventElapsedTime(&ms, start, end), CUDA_SUCCESS);
    return static_cast<double>(ms);
  };
  const double count_ms = timed([&] { ASSERT_TRUE(codec.count(at.data(), kPages, 1, nullptr)); });
  // Planned from the last count: a count writes its words over the prefix
  // a plan leaves in the table (the first GPU run of this test planned
  // before the timed count, and the pack faulted on the counts' offsets).
  std::vector<residency::PageCodec::Page> packs;
  std::uint64_t stream_bytes = 0;
  for (std::size_t i = 0; i < kPages; ++i) {
    stream_bytes += codec.plan(i, kernels::Codec::zero32);
    packs.push_back({at[i], streams + i * room, kernels::Codec::zero32, i});
  }
  const double pack_ms = timed([&] { ASSERT_TRUE(codec.pack(packs.data(), packs.size(), nullptr)); });
  ASSERT_EQ(api.memsetD8(pages, 0, kPages * kPage), CUDA_SUCCESS) << "the unpack must write every page back";
  const double unpack_ms = timed([&] { ASSERT_TRUE(codec.unpack(packs.data(), packs.size(), nullptr)); });
  const double page_bytes = static_cast<double>(kPages * kPage);
  std::printf(
      "codec on %zu pages of 2 MiB, half zero: count %.1f GB/s, pack %.1f GB/s of pages (%.1f GB/s to the "
      "host), unpack %.1f GB/s of pages; ratio %.2f\n",
      kPages, page_bytes / count_ms / 1e6, page_bytes / pack_ms / 1e6,
      static_cast<double>(stream_bytes) / pack_ms / 1e6, page_bytes / unpack_ms / 1e6,
      page_bytes / static_cast<double>(stream_bytes));
  std::vector<unsigned char> back(kPage);
  for (std::size_t i = 0; i < kPages; i += kPages - 1) {
    ASSERT_EQ(api.memcpyDtoH(back.data(), at[i], kPage), CUDA_SUCCESS);
    EXPECT_TRUE(back == data) << "page " << i << " unpacked differs from the page packed";
  }
  RecordProperty("pack_gbps", std::to_string(page_bytes / pack_ms / 1e6));
  RecordProperty("unpack_gbps", std::to_string(page_bytes / unpack_ms / 1e6));
  (void)api.eventDestroy(start);
  (void)api.eventDestroy(end);
  (void)api.memFreeHost(host);
  (void)api.memFree(pages);
}

}  // namespace
}  // namespace tidepool
