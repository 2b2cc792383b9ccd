// Specification of tidepool::rmm_resource (include/tidepool/rmm.hpp): RMM's
// type-erased resource references drive it, memory comes from tidepool's
// pool on the sim and goes back to it, and failures are RMM's exceptions.
#include <gtest/gtest.h>

#include <cstring>
#include <rmm/resource_ref.hpp>
#include <tidepool/rmm.hpp>

namespace {

tidepool_stats stats() {
  tidepool_stats s{};
  EXPECT_EQ(tidepool_get_stats(0, &s), TIDEPOOL_OK);
  return s;
}

TEST(RmmResource, AsyncResourceRefAllocatesFromThePoolAndReturnsToIt) {
  tidepool::rmm_resource pool{0};
  rmm::device_async_resource_ref ref{pool};
  const cuda::stream_ref stream{cudaStream_t{nullptr}};
  const tidepool_stats before = stats();
  void* a = ref.allocate(stream, 3 << 20, 256);
  void* b = ref.allocate_sync(1000, 512);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % 512, 0u);
  std::memset(a, 0x5a, 3 << 20);  // sim device memory is host-addressable
  std::memset(b, 0x33, 1000);
  EXPECT_EQ(static_cast<unsigned char*>(a)[(3 << 20) - 1], 0x5a);
  const tidepool_stats during = stats();
  EXPECT_EQ(during.allocations - before.allocations, 2u);
  ref.deallocate(stream, a, 3 << 20, 256);
  ref.deallocate_sync(b, 1000, 512);
  const tidepool_stats after = stats();
  EXPECT_EQ(after.frees - before.frees, 2u);
  EXPECT_EQ(after.live_bytes, before.live_bytes);
}

TEST(RmmResource, ResourcesOnOneDeviceAreInterchangeable) {
  tidepool::rmm_resource one{0};
  tidepool::rmm_resource two{0};
  EXPECT_TRUE(one == two);
  EXPECT_FALSE(one == tidepool::rmm_resource{1});
  void* p = one.allocate_sync(4096);
  two.deallocate_sync(p, 4096);
}

TEST(RmmResource, FailuresAreRmmExceptions) {
  tidepool::rmm_resource pool{0};
  EXPECT_THROW((void)pool.allocate_sync(std::size_t{1} << 50), rmm::out_of_memory);
  EXPECT_THROW((void)pool.allocate_sync(4096, 4096), rmm::logic_error);
  void* p = pool.allocate_sync(4096);  // still usable
  EXPECT_NE(p, nullptr);
  pool.deallocate_sync(p, 4096);
}

}  // namespace
