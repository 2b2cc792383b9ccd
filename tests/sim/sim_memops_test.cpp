// Specification of the sim's transfer model and stream memory operations: the
// host<->device copy bandwidth, launches whose arguments reach host-located
// memory, cuLaunchKernelEx and the per-thread launch forms, and
// cuStreamWaitValue/cuStreamWriteValue. Times are checked from below only.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "sim/sim_control.h"
#include "support/cuda_arrays.hpp"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"

namespace tidepool {
namespace {

using testing::Gate;
using testing::gated_write_kernel;
using testing::launch_gated_write;
using testing::sim_control;
using testing::sim_driver;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMiB = std::size_t{1} << 20;

const driver::Api& api() { return sim_driver().api(); }

// Entry points tidepool's table lacks, resolved from the sim by ABI name.
template <typename Fn>
Fn entry(const char* name) {
  return sim_control<Fn>(name);
}

using WaitValue32 = decltype(&::cuStreamWaitValue32_v2);
using WaitValue64 = decltype(&::cuStreamWaitValue64_v2);
using WriteValue32 = decltype(&::cuStreamWriteValue32_v2);
using WriteValue64 = decltype(&::cuStreamWriteValue64_v2);
using LaunchKernel = decltype(&::cuLaunchKernel);
using LaunchKernelEx = decltype(&::cuLaunchKernelEx);
using HostGetDevicePointer = decltype(&::cuMemHostGetDevicePointer_v2);
using ElapsedTime = decltype(&::cuEventElapsedTime_v2);
using BatchMemOp = decltype(&::cuStreamBatchMemOp_v2);
using CopyBatch = decltype(&::cuMemcpyBatchAsync_v2);
using CopyBatchV1 = CUresult (*)(CUdeviceptr*, CUdeviceptr*, std::size_t*, std::size_t, CUmemcpyAttributes*,
                                 std::size_t*, std::size_t, std::size_t*, CUstream);

void set_copy_gbps(double gbps) {
  sim_control<decltype(&tidepool_sim_set_copy_gbps)>("tidepool_sim_set_copy_gbps")(gbps);
}
std::uint64_t copied(bool to_device) {
  return sim_control<decltype(&tidepool_sim_copied_bytes)>("tidepool_sim_copied_bytes")(to_device ? 1 : 0);
}
std::uint64_t host_resident_launches() {
  return sim_control<decltype(&tidepool_sim_host_resident_launches)>("tidepool_sim_host_resident_launches")();
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Polls until `done` holds; the bound turns a sim that never gets there into
// a failure instead of a hang. It is no claim about speed.
template <typename Done>
bool eventually(Done done) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Long enough for stream work that could run to have run, were it not held back.
void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

// --- kernels ------------------------------------------------------------------------------------------

// Marks the int its only argument points at, so tests see when it ran.
void set_flag(void** params, void* /*user*/) { __atomic_store_n(*static_cast<int**>(params[0]), 1, __ATOMIC_RELEASE); }

bool flag_set(const int& flag) { return __atomic_load_n(&flag, __ATOMIC_ACQUIRE) != 0; }

// Counts its runs in the atomic it was registered with; never reads its arguments.
void count_run(void** /*params*/, void* user) { static_cast<std::atomic<int>*>(user)->fetch_add(1); }

CUfunction register_kernel(tidepool_sim_kernel_fn fn, const std::vector<std::size_t>& sizes, void* user = nullptr) {
  CUfunction f = nullptr;
  auto reg = sim_control<decltype(&tidepool_sim_register_kernel)>("tidepool_sim_register_kernel");
  EXPECT_EQ(reg(&f, fn, user, sizes.size(), sizes.data()), CUDA_SUCCESS);
  return f;
}

CUfunction set_flag_kernel() {
  static CUfunction f = register_kernel(&set_flag, {sizeof(int*)});
  return f;
}

CUresult launch_set_flag(CUstream stream, int* flag) {
  void* params[] = {&flag};
  return api().launchKernel(set_flag_kernel(), 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
}

class SimTransfers : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(api().init(0), CUDA_SUCCESS);
    ASSERT_EQ(api().devicePrimaryCtxRetain(&context_, 0), CUDA_SUCCESS);
    ASSERT_EQ(api().ctxSetCurrent(context_), CUDA_SUCCESS);
    CUmemAllocationProp prop = physical_prop(CU_MEM_LOCATION_TYPE_DEVICE);
    ASSERT_EQ(api().memGetAllocationGranularity(&page_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  }
  void TearDown() override {
    set_copy_gbps(0);
    sim_control<void (*)()>("tidepool_sim_clear_faults")();
    api().devicePrimaryCtxRelease(0);
  }
  static CUmemAllocationProp physical_prop(CUmemLocationType where) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = where;
    prop.location.id = 0;
    return prop;
  }
  // Maps one page of `where`-located physical memory at `at`, readable and
  // writable; returns its handle.
  CUmemGenericAllocationHandle map_page(CUdeviceptr at, CUmemLocationType where) {
    CUmemAllocationProp prop = physical_prop(where);
    CUmemGenericAllocationHandle h = 0;
    EXPECT_EQ(api().memCreate(&h, page_, &prop, 0), CUDA_SUCCESS);
    EXPECT_EQ(api().memMap(at, page_, 0, h, 0), CUDA_SUCCESS);
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    EXPECT_EQ(api().memSetAccess(at, page_, &access, 1), CUDA_SUCCESS);
    return h;
  }
  void unmap_page(CUdeviceptr at, CUmemGenericAllocationHandle h) {
    EXPECT_EQ(api().memUnmap(at, page_), CUDA_SUCCESS);
    EXPECT_EQ(api().memRelease(h), CUDA_SUCCESS);
  }
  // Two pages of reserved VA: the first mapped to host-located memory, the
  // second to device memory.
  struct HostAndDevicePages {
    CUdeviceptr va = 0;
    CUdeviceptr host_page = 0;
    CUdeviceptr device_page = 0;
    CUmemGenericAllocationHandle on_host = 0;
    CUmemGenericAllocationHandle on_device = 0;
  };
  HostAndDevicePages map_host_and_device_pages() {
    HostAndDevicePages pages;
    EXPECT_EQ(api().memAddressReserve(&pages.va, 2 * page_, 0, 0, 0), CUDA_SUCCESS);
    pages.host_page = pages.va;
    pages.device_page = pages.va + page_;
    pages.on_host = map_page(pages.host_page, CU_MEM_LOCATION_TYPE_HOST);
    pages.on_device = map_page(pages.device_page, CU_MEM_LOCATION_TYPE_DEVICE);
    return pages;
  }
  void unmap(const HostAndDevicePages& pages) {
    unmap_page(pages.host_page, pages.on_host);
    unmap_page(pages.device_page, pages.on_device);
    EXPECT_EQ(api().memAddressFree(pages.va, 2 * page_), CUDA_SUCCESS);
  }
  static CUstream new_stream() {
    CUstream stream = nullptr;
    EXPECT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    return stream;
  }

  CUcontext context_ = nullptr;
  std::size_t page_ = 0;
};

// --- the copy bandwidth model -------------------------------------------------------------------------

TEST_F(SimTransfers, HostToDeviceCopyTakesBytesOverBandwidthOfStreamTime) {
  constexpr std::size_t kBytes = 64 * kMiB;  // 67.1 ms at 1 GB/s
  CUdeviceptr device = 0;
  ASSERT_EQ(api().memAlloc(&device, kBytes), CUDA_SUCCESS);
  // Both sides touched first: faulting pages in would take time of its own.
  ASSERT_EQ(api().memsetD8(device, 0, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  std::vector<unsigned char> host(kBytes, 0x5a);              // pageable
  CUstream stream = new_stream();
  CUevent start = nullptr;
  CUevent end = nullptr;
  ASSERT_EQ(api().eventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().eventCreate(&end, 0), CUDA_SUCCESS);
  const std::uint64_t to_device = copied(true);
  const std::uint64_t to_host = copied(false);
  set_copy_gbps(1.0);
  const auto t0 = Clock::now();
  ASSERT_EQ(api().eventRecord(start, stream), CUDA_SUCCESS);
  ASSERT_EQ(api().memcpyHtoDAsync(device, host.data(), kBytes, stream), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(end, stream), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_GE(ms_since(t0), 60.0);
  float ms = 0;
  ASSERT_EQ(entry<ElapsedTime>("cuEventElapsedTime_v2")(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 60.0F);
  EXPECT_EQ(copied(true) - to_device, kBytes);
  EXPECT_EQ(copied(false) - to_host, 0u);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(device)[kBytes - 1], 0x5a);
  api().eventDestroy(start);
  api().eventDestroy(end);
  api().streamDestroy(stream);
  api().memFree(device);
}

TEST_F(SimTransfers, SynchronousCopiesBothWaysRunOnTheLegacyStreamAtTheBandwidth) {
  constexpr std::size_t kBytes = 16 * kMiB;  // 33.6 ms at 0.5 GB/s
  CUdeviceptr device = 0;
  ASSERT_EQ(api().memAlloc(&device, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(device, 0, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  std::vector<unsigned char> host(kBytes, 3);
  const std::uint64_t to_device = copied(true);
  const std::uint64_t to_host = copied(false);
  set_copy_gbps(0.5);
  auto t0 = Clock::now();
  ASSERT_EQ(api().memcpyHtoD(device, host.data(), kBytes), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // from pageable memory the call returns early
  EXPECT_GE(ms_since(t0), 30.0);
  ASSERT_EQ(api().memsetD8(device, 7, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  t0 = Clock::now();
  ASSERT_EQ(api().memcpyDtoH(host.data(), device, kBytes), CUDA_SUCCESS);
  EXPECT_GE(ms_since(t0), 30.0);  // the caller waits for the copy to the host
  EXPECT_EQ(host[kBytes - 1], 7);
  EXPECT_EQ(copied(true) - to_device, kBytes);
  EXPECT_EQ(copied(false) - to_host, kBytes);
  api().memFree(device);
}

TEST_F(SimTransfers, CopiesWithinTheDeviceOrTheHostAndUnlimitedCopiesAreNotSlowed) {
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  ASSERT_EQ(api().memAlloc(&a, kMiB), CUDA_SUCCESS);
  ASSERT_EQ(api().memAlloc(&b, kMiB), CUDA_SUCCESS);
  void* pinned = nullptr;
  ASSERT_EQ(api().memAllocHost(&pinned, kMiB), CUDA_SUCCESS);
  std::vector<unsigned char> pageable(kMiB);
  CUstream stream = new_stream();
  const std::uint64_t to_device = copied(true);
  const std::uint64_t to_host = copied(false);
  set_copy_gbps(1e-6);  // a slowed 1 MiB copy would take twelve days
  ASSERT_EQ(api().memcpyDtoDAsync(b, a, kMiB, stream), CUDA_SUCCESS);
  ASSERT_EQ(api().memcpyAsync(reinterpret_cast<CUdeviceptr>(pageable.data()), reinterpret_cast<CUdeviceptr>(pinned),
                              kMiB, stream),
            CUDA_SUCCESS);
  ASSERT_TRUE(eventually([&] { return api().streamQuery(stream) == CUDA_SUCCESS; }));
  EXPECT_EQ(copied(true), to_device);
  EXPECT_EQ(copied(false), to_host);
  set_copy_gbps(0);
  ASSERT_EQ(api().memcpyHtoDAsync(a, pageable.data(), kMiB, stream), CUDA_SUCCESS);
  ASSERT_TRUE(eventually([&] { return api().streamQuery(stream) == CUDA_SUCCESS; }));
  EXPECT_EQ(copied(true) - to_device, kMiB);  // counted even when unlimited
  api().streamDestroy(stream);
  api().memFreeHost(pinned);
  api().memFree(a);
  api().memFree(b);
}

TEST_F(SimTransfers, PinnedAndHostLocatedMappedMemoryIsHostMemory) {
  const HostAndDevicePages pages = map_host_and_device_pages();
  const CUdeviceptr host_page = pages.host_page;
  const CUdeviceptr device_page = pages.device_page;
  void* pinned = nullptr;
  ASSERT_EQ(api().memAllocHost(&pinned, 4096), CUDA_SUCCESS);
  CUdeviceptr device = 0;
  ASSERT_EQ(api().memAlloc(&device, 4096), CUDA_SUCCESS);
  std::vector<unsigned char> pageable(4096, 9);
  CUstream stream = new_stream();
  const std::uint64_t to_device = copied(true);
  const std::uint64_t to_host = copied(false);
  const auto at = [](const void* p) { return reinterpret_cast<CUdeviceptr>(p); };
  ASSERT_EQ(api().memcpyAsync(host_page, at(pageable.data()), 4096, stream), CUDA_SUCCESS);  // host to host
  ASSERT_EQ(api().memcpyAsync(device_page, host_page, 1000, stream), CUDA_SUCCESS);          // to the device
  ASSERT_EQ(api().memcpyAsync(device, at(pinned), 100, stream), CUDA_SUCCESS);               // to the device
  ASSERT_EQ(api().memcpyDtoHAsync(pageable.data(), device_page, 10, stream), CUDA_SUCCESS);  // to the host
  ASSERT_EQ(api().memcpyAsync(host_page, device, 1, stream), CUDA_SUCCESS);                  // to the host
  ASSERT_EQ(api().memcpyDtoDAsync(device, device_page, 4096, stream), CUDA_SUCCESS);         // within the device
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(copied(true) - to_device, 1100u);
  EXPECT_EQ(copied(false) - to_host, 11u);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(device)[999], 9);
  api().streamDestroy(stream);
  unmap(pages);
  api().memFreeHost(pinned);
  api().memFree(device);
}

TEST_F(SimTransfers, ACopysPathIsTheOneWhenItRunsNotWhenItIsQueued) {
  // As residency brings a page back: the copies are queued while the page is
  // still host-located, and the page is remapped to the device before they
  // run. On a GPU they cross the link; so must they here, counted and slowed.
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, page_, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle on_host = map_page(va, CU_MEM_LOCATION_TYPE_HOST);
  void* in = nullptr;
  void* out = nullptr;
  ASSERT_EQ(api().memAllocHost(&in, page_), CUDA_SUCCESS);
  ASSERT_EQ(api().memAllocHost(&out, page_), CUDA_SUCCESS);
  std::memset(in, 0x3c, page_);
  std::memset(out, 0, page_);
  CUstream stream = new_stream();
  CUevent start = nullptr;
  CUevent end = nullptr;
  ASSERT_EQ(api().eventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().eventCreate(&end, 0), CUDA_SUCCESS);
  set_copy_gbps(0.1);  // 2 MiB each way: 21 ms each
  const std::uint64_t to_device = copied(true);
  const std::uint64_t to_host = copied(false);
  int cell = 0;
  Gate gate;
  ASSERT_EQ(launch_gated_write(stream, &gate, &cell, 1), CUDA_SUCCESS);
  const auto at = [](const void* p) { return reinterpret_cast<CUdeviceptr>(p); };
  ASSERT_EQ(api().eventRecord(start, stream), CUDA_SUCCESS);
  ASSERT_EQ(api().memcpyAsync(va, at(in), page_, stream), CUDA_SUCCESS);   // queued host to host
  ASSERT_EQ(api().memcpyAsync(at(out), va, page_, stream), CUDA_SUCCESS);  // queued host to host
  ASSERT_EQ(api().eventRecord(end, stream), CUDA_SUCCESS);
  settle();
  // Remapped to the device before the copies run.
  unmap_page(va, on_host);
  CUmemGenericAllocationHandle on_device = map_page(va, CU_MEM_LOCATION_TYPE_DEVICE);
  gate.release();
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(copied(true) - to_device, page_) << "into a device page when it ran";
  EXPECT_EQ(copied(false) - to_host, page_) << "out of a device page when it ran";
  float ms = 0;
  ASSERT_EQ(entry<ElapsedTime>("cuEventElapsedTime_v2")(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 40.0F) << "both copies charged at the link's bandwidth";
  EXPECT_EQ(static_cast<const unsigned char*>(out)[page_ - 1], 0x3c);
  EXPECT_EQ(cell, 1);
  api().eventDestroy(start);
  api().eventDestroy(end);
  api().streamDestroy(stream);
  unmap_page(va, on_device);
  EXPECT_EQ(api().memAddressFree(va, page_), CUDA_SUCCESS);
  api().memFreeHost(in);
  api().memFreeHost(out);
}

TEST_F(SimTransfers, ASlowCopyHoldsUpOnlyItsOwnStream) {
  CUdeviceptr device = 0;
  ASSERT_EQ(api().memAlloc(&device, 9 * kMiB), CUDA_SUCCESS);
  std::vector<unsigned char> host(9 * kMiB);
  CUstream slow = new_stream();
  CUstream other = new_stream();
  CUevent start = nullptr;
  CUevent end = nullptr;
  ASSERT_EQ(api().eventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().eventCreate(&end, 0), CUDA_SUCCESS);
  set_copy_gbps(0.02);  // 8 MiB: 419 ms; 1 MiB: 52 ms
  ASSERT_EQ(api().memcpyHtoDAsync(device, host.data(), 8 * kMiB, slow), CUDA_SUCCESS);
  // A copy of its own on another stream gets its own time, not a place behind the first.
  ASSERT_EQ(api().eventRecord(start, other), CUDA_SUCCESS);
  ASSERT_EQ(api().memcpyHtoDAsync(device + 8 * kMiB, host.data(), kMiB, other), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(end, other), CUDA_SUCCESS);
  int flag = 0;
  ASSERT_EQ(launch_set_flag(other, &flag), CUDA_SUCCESS);  // submitting takes the sim's lock: not held by the sleep
  ASSERT_TRUE(eventually([&] { return flag_set(flag); }));
  EXPECT_EQ(api().streamQuery(slow), CUDA_ERROR_NOT_READY);
  float ms = 0;
  ASSERT_EQ(entry<ElapsedTime>("cuEventElapsedTime_v2")(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 50.0F);
  ASSERT_EQ(api().streamSynchronize(slow), CUDA_SUCCESS);
  api().eventDestroy(start);
  api().eventDestroy(end);
  api().streamDestroy(slow);
  api().streamDestroy(other);
  api().memFree(device);
}

// --- launches that reach host-located memory ----------------------------------------------------------

TEST_F(SimTransfers, LaunchesWhoseArgumentsPointIntoHostLocatedPagesAreCountedOnceAndStillRun) {
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, 2 * page_, 0, 0, 0), CUDA_SUCCESS);
  const CUdeviceptr host_page = va;
  const CUdeviceptr device_page = va + page_;
  CUmemGenericAllocationHandle on_host = map_page(host_page, CU_MEM_LOCATION_TYPE_HOST);
  CUmemGenericAllocationHandle on_device = map_page(device_page, CU_MEM_LOCATION_TYPE_DEVICE);
  CUdeviceptr device = 0;
  ASSERT_EQ(api().memAlloc(&device, 4096), CUDA_SUCCESS);
  void* pinned = nullptr;
  ASSERT_EQ(api().memAllocHost(&pinned, 4096), CUDA_SUCCESS);
  std::atomic<int> runs{0};
  const CUfunction two_pointers = register_kernel(&count_run, {8, 8}, &runs);
  const CUfunction one_struct = register_kernel(&count_run, {24}, &runs);
  const CUfunction packed = register_kernel(&count_run, {16}, &runs);
  auto launch = [&](CUfunction f, void** params) {
    ASSERT_EQ(api().launchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
    ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  };
  const std::uint64_t base = host_resident_launches();

  CUdeviceptr p = host_page + 64;
  CUdeviceptr q = host_page + 128;
  void* both_host[] = {&p, &q};
  launch(two_pointers, both_host);
  EXPECT_EQ(host_resident_launches(), base + 1);  // once, however many arguments reach it

  CUdeviceptr d = device_page + 8;
  CUdeviceptr e = device;
  void* on_device_only[] = {&d, &e};
  launch(two_pointers, on_device_only);
  CUdeviceptr h = reinterpret_cast<CUdeviceptr>(pinned);  // pinned, but no VMM page of host memory
  void* pinned_only[] = {&h, &d};
  launch(two_pointers, pinned_only);
  EXPECT_EQ(host_resident_launches(), base + 1);

  struct {
    std::int32_t a;
    std::int32_t b;
    CUdeviceptr inside;  // at offset 8
    std::uint64_t c;
  } holder{1, 2, host_page + page_ - 8, 3};
  void* struct_args[] = {&holder};
  launch(one_struct, struct_args);
  EXPECT_EQ(host_resident_launches(), base + 2);

  unsigned char bytes[16] = {};
  const CUdeviceptr unaligned = host_page + 256;
  std::memcpy(bytes + 4, &unaligned, sizeof unaligned);  // no 8-byte-aligned word holds it
  void* packed_args[] = {bytes};
  launch(packed, packed_args);
  EXPECT_EQ(host_resident_launches(), base + 2);

  unmap_page(host_page, on_host);  // no longer mapped: no longer host-resident
  launch(two_pointers, both_host);
  EXPECT_EQ(host_resident_launches(), base + 2);
  EXPECT_EQ(runs.load(), 6);

  unmap_page(device_page, on_device);
  EXPECT_EQ(api().memAddressFree(va, 2 * page_), CUDA_SUCCESS);
  api().memFreeHost(pinned);
  api().memFree(device);
}

// A stream's copies and sets that reach VA mapped to host-located memory are
// counted on that stream, judged when they run (a source read at the call,
// from pageable memory, when the call is made); device memory, pinned host
// memory outside VMM, and other streams' copies leave the count alone.
TEST_F(SimTransfers, CopiesAndSetsThatReachHostLocatedPagesAreCountedOnTheirStream) {
  const HostAndDevicePages pages = map_host_and_device_pages();
  const CUdeviceptr host_page = pages.host_page;
  const CUdeviceptr device_page = pages.device_page;
  const auto reached = sim_control<decltype(&tidepool_sim_host_resident_copies)>("tidepool_sim_host_resident_copies");
  CUstream stream = new_stream();
  CUstream other = new_stream();
  void* pinned = nullptr;
  ASSERT_EQ(api().memAllocHost(&pinned, 4096), CUDA_SUCCESS);
  std::vector<unsigned char> pageable(4096, 7);
  const std::uint64_t base = reached(stream);
  const std::uint64_t other_base = reached(other);
  const auto done = [&](CUresult r) {
    ASSERT_EQ(r, CUDA_SUCCESS);
    ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  };
  done(api().memcpyDtoDAsync(device_page, device_page + 4096, 4096, stream));
  done(api().memcpyHtoDAsync(device_page, pinned, 4096, stream));
  done(api().memsetD8Async(device_page, 1, 4096, stream));
  EXPECT_EQ(reached(stream), base) << "device memory and pinned host memory are not host-located pages";
  done(api().memcpyDtoDAsync(device_page, host_page, 4096, stream));
  EXPECT_EQ(reached(stream), base + 1);
  done(api().memcpyHtoDAsync(host_page, pageable.data(), 4096, stream));  // staged: the destination decides
  EXPECT_EQ(reached(stream), base + 2);
  done(api().memsetD8Async(host_page, 3, 4096, stream));
  EXPECT_EQ(reached(stream), base + 3);
  done(api().memcpyDtoDAsync(host_page + 4096, device_page, 4096, other));
  EXPECT_EQ(reached(stream), base + 3);
  EXPECT_EQ(reached(other), other_base + 1);
  std::vector<unsigned char> back(4096);
  ASSERT_EQ(api().memcpyDtoH(back.data(), host_page, 4096), CUDA_SUCCESS);
  EXPECT_EQ(back[0], 3);
  EXPECT_EQ(reached(reinterpret_cast<CUstream>(0xdead0)), 0u) << "no stream, no count";
  api().streamDestroy(stream);
  api().streamDestroy(other);
  api().memFreeHost(pinned);
  unmap(pages);
}

// A captured copy or set counts when its graph runs, if any byte of its
// range lies on a host-located page: here only the tail of each range does.
TEST_F(SimTransfers, GraphCopiesAndSetsCountWhenAnyByteOfTheirRangeIsOnAHostPage) {
  const HostAndDevicePages pages = map_host_and_device_pages();
  // [device page][host page]: ranges that start on the device page and end on the host one.
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, 2 * page_, 0, 0, 0), CUDA_SUCCESS);
  const CUmemGenericAllocationHandle low = map_page(va, CU_MEM_LOCATION_TYPE_DEVICE);
  const CUmemGenericAllocationHandle high = map_page(va + page_, CU_MEM_LOCATION_TYPE_HOST);
  const CUdeviceptr straddle = va + page_ - 4096;
  const auto reached = sim_control<std::uint64_t (*)()>("tidepool_sim_host_resident_graph_copies");
  const auto begin = entry<decltype(&::cuStreamBeginCapture_v2)>("cuStreamBeginCapture_v2");
  const auto end = entry<decltype(&::cuStreamEndCapture)>("cuStreamEndCapture");
  const auto instantiate = entry<decltype(&::cuGraphInstantiateWithFlags)>("cuGraphInstantiateWithFlags");
  const auto launch = entry<decltype(&::cuGraphLaunch)>("cuGraphLaunch");
  const auto destroy_exec = entry<decltype(&::cuGraphExecDestroy)>("cuGraphExecDestroy");
  const auto destroy_graph = entry<decltype(&::cuGraphDestroy)>("cuGraphDestroy");
  CUstream stream = new_stream();
  // Each case is one node: a set, a copy whose destination straddles, one
  // whose source does, and a copy wholly on the device page.
  const auto run_one = [&](const std::function<CUresult()>& queue) -> std::uint64_t {
    EXPECT_EQ(begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    EXPECT_EQ(queue(), CUDA_SUCCESS);
    CUgraph graph = nullptr;
    EXPECT_EQ(end(stream, &graph), CUDA_SUCCESS);
    CUgraphExec exec = nullptr;
    EXPECT_EQ(instantiate(&exec, graph, 0), CUDA_SUCCESS);
    const std::uint64_t before = reached();
    EXPECT_EQ(launch(exec, stream), CUDA_SUCCESS);
    EXPECT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
    const std::uint64_t counted = reached() - before;
    EXPECT_EQ(destroy_exec(exec), CUDA_SUCCESS);
    EXPECT_EQ(destroy_graph(graph), CUDA_SUCCESS);
    return counted;
  };
  EXPECT_EQ(run_one([&] { return api().memsetD8Async(straddle, 1, 8192, stream); }), 1u);
  EXPECT_EQ(run_one([&] { return api().memcpyDtoDAsync(straddle, pages.device_page, 8192, stream); }), 1u);
  EXPECT_EQ(run_one([&] { return api().memcpyDtoDAsync(pages.device_page, straddle, 8192, stream); }), 1u);
  EXPECT_EQ(run_one([&] { return api().memcpyDtoDAsync(va, pages.device_page, 8192, stream); }), 0u)
      << "device pages only";
  api().streamDestroy(stream);
  unmap_page(va, low);
  unmap_page(va + page_, high);
  EXPECT_EQ(api().memAddressFree(va, 2 * page_), CUDA_SUCCESS);
  unmap(pages);
}

TEST_F(SimTransfers, AHostResidentLaunchCountsWhenItRunsNotWhenItIsQueued) {
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, page_, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle on_host = map_page(va, CU_MEM_LOCATION_TYPE_HOST);
  std::atomic<int> runs{0};
  const CUfunction one_pointer = register_kernel(&count_run, {8}, &runs);
  CUstream stream = new_stream();
  int cell = 0;
  Gate gate;
  ASSERT_EQ(launch_gated_write(stream, &gate, &cell, 1), CUDA_SUCCESS);
  const std::uint64_t base = host_resident_launches();
  CUdeviceptr p = va;
  void* params[] = {&p};
  ASSERT_EQ(api().launchKernel(one_pointer, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr), CUDA_SUCCESS);
  settle();
  EXPECT_EQ(host_resident_launches(), base);
  gate.release();
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(host_resident_launches(), base + 1);
  EXPECT_EQ(runs.load(), 1);
  api().streamDestroy(stream);
  unmap_page(va, on_host);
  EXPECT_EQ(api().memAddressFree(va, page_), CUDA_SUCCESS);
}

// --- cuLaunchKernelEx and the per-thread launch forms --------------------------------------------------

TEST_F(SimTransfers, LaunchKernelExRunsTheKernelOnTheConfigsStream) {
  auto launch_ex = entry<LaunchKernelEx>("cuLaunchKernelEx");
  CUstream stream = new_stream();
  Gate gate;
  Gate* gate_ptr = &gate;
  int cell = 0;
  int* target = &cell;
  int value = 42;
  void* params[] = {&gate_ptr, &target, &value};
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  ASSERT_EQ(launch_ex(&config, gated_write_kernel(), params, nullptr), CUDA_SUCCESS);
  settle();
  EXPECT_EQ(api().streamQuery(stream), CUDA_ERROR_NOT_READY);  // waiting on the gate there
  EXPECT_EQ(api().streamQuery(nullptr), CUDA_SUCCESS);         // not on the legacy stream
  gate.release();
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(cell, 42);

  EXPECT_EQ(launch_ex(nullptr, gated_write_kernel(), params, nullptr), CUDA_ERROR_INVALID_VALUE);
  config.numAttrs = 1;  // and no attributes to read
  EXPECT_EQ(launch_ex(&config, gated_write_kernel(), params, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUlaunchAttribute priority{};
  priority.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  priority.value.priority = 0;
  config.attrs = &priority;
  value = 43;
  ASSERT_EQ(launch_ex(&config, gated_write_kernel(), params, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(cell, 43);

  // Counted like cuLaunchKernel when its arguments reach host-located memory.
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, page_, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle on_host = map_page(va, CU_MEM_LOCATION_TYPE_HOST);
  std::atomic<int> runs{0};
  const CUfunction one_pointer = register_kernel(&count_run, {8}, &runs);
  const std::uint64_t base = host_resident_launches();
  CUdeviceptr p = va + 16;
  void* pointer_args[] = {&p};
  ASSERT_EQ(launch_ex(&config, one_pointer, pointer_args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(host_resident_launches(), base + 1);
  EXPECT_EQ(runs.load(), 1);
  unmap_page(va, on_host);
  EXPECT_EQ(api().memAddressFree(va, page_), CUDA_SUCCESS);
  api().streamDestroy(stream);
}

TEST_F(SimTransfers, PerThreadLaunchFormsRunOnTheCallingThreadsStream) {
  auto launch_ptsz = entry<LaunchKernel>("cuLaunchKernel_ptsz");
  auto launch_ex_ptsz = entry<LaunchKernelEx>("cuLaunchKernelEx_ptsz");
  Gate gate;
  Gate* gate_ptr = &gate;
  int cell = 0;
  int* target = &cell;
  int value = 1;
  void* params[] = {&gate_ptr, &target, &value};
  ASSERT_EQ(launch_ptsz(gated_write_kernel(), 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  settle();
  EXPECT_EQ(api().streamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  CUresult elsewhere = CUDA_ERROR_UNKNOWN;
  std::thread other([&] {
    api().ctxSetCurrent(context_);
    elsewhere = api().streamQuery(CU_STREAM_PER_THREAD);  // another thread's stream: idle
  });
  other.join();
  EXPECT_EQ(elsewhere, CUDA_SUCCESS);
  gate.release();
  ASSERT_EQ(api().streamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(cell, 1);

  Gate second;
  gate_ptr = &second;
  value = 2;
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  config.hStream = nullptr;
  ASSERT_EQ(launch_ex_ptsz(&config, gated_write_kernel(), params, nullptr), CUDA_SUCCESS);
  settle();
  EXPECT_EQ(api().streamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  second.release();
  ASSERT_EQ(api().streamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(cell, 2);
}

// --- stream memory operations -------------------------------------------------------------------------

struct MemOps {
  WaitValue32 wait32 = entry<WaitValue32>("cuStreamWaitValue32_v2");
  WaitValue64 wait64 = entry<WaitValue64>("cuStreamWaitValue64_v2");
  WriteValue32 write32 = entry<WriteValue32>("cuStreamWriteValue32_v2");
  WriteValue64 write64 = entry<WriteValue64>("cuStreamWriteValue64_v2");
  WaitValue32 wait32_ptsz = entry<WaitValue32>("cuStreamWaitValue32_v2_ptsz");
  WriteValue32 write32_ptsz = entry<WriteValue32>("cuStreamWriteValue32_v2_ptsz");
  HostGetDevicePointer device_pointer = entry<HostGetDevicePointer>("cuMemHostGetDevicePointer_v2");
};

const MemOps& memops() {
  static const MemOps ops;
  return ops;
}

// A plain store from the host, as a program signalling the device would make.
template <typename T>
void host_store(CUdeviceptr at, T value) {
  *reinterpret_cast<volatile T*>(at) = value;
}

TEST_F(SimTransfers, WaitValueHoldsBackLaterWorkOnItsStreamUntilTheHostStoresTheValue) {
  void* host = nullptr;
  ASSERT_EQ(api().memHostAlloc(&host, 4096, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  CUdeviceptr word = 0;
  ASSERT_EQ(memops().device_pointer(&word, host, 0), CUDA_SUCCESS);
  EXPECT_EQ(word, reinterpret_cast<CUdeviceptr>(host));
  host_store<std::uint32_t>(word, 0);
  CUstream waiting = new_stream();
  CUstream other = new_stream();
  int after_wait = 0;
  int elsewhere = 0;
  ASSERT_EQ(memops().wait32(waiting, word, 5, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  ASSERT_EQ(launch_set_flag(waiting, &after_wait), CUDA_SUCCESS);
  ASSERT_EQ(launch_set_flag(other, &elsewhere), CUDA_SUCCESS);
  ASSERT_TRUE(eventually([&] { return flag_set(elsewhere); }));  // other streams go on
  settle();
  EXPECT_FALSE(flag_set(after_wait));
  EXPECT_EQ(api().streamQuery(waiting), CUDA_ERROR_NOT_READY);
  host_store<std::uint32_t>(word, 4);
  settle();
  EXPECT_FALSE(flag_set(after_wait));
  host_store<std::uint32_t>(word, 5);
  ASSERT_TRUE(eventually([&] { return flag_set(after_wait); }));
  ASSERT_EQ(api().streamSynchronize(waiting), CUDA_SUCCESS);
  api().streamDestroy(waiting);
  api().streamDestroy(other);
  api().memFreeHost(host);
}

TEST_F(SimTransfers, WriteValueOnOneStreamReleasesAWaitOnAnother) {
  CUdeviceptr words = 0;
  ASSERT_EQ(api().memAlloc(&words, 64), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(words, 0, 64), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  CUstream waiting = new_stream();
  CUstream writing = new_stream();
  int done32 = 0;
  int done64 = 0;
  constexpr std::uint64_t kBig = 0x100000002ULL;  // its low word alone would not do
  ASSERT_EQ(memops().wait32(waiting, words, 7, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
  ASSERT_EQ(launch_set_flag(waiting, &done32), CUDA_SUCCESS);
  ASSERT_EQ(memops().wait64(waiting, words + 8, kBig, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  ASSERT_EQ(launch_set_flag(waiting, &done64), CUDA_SUCCESS);
  Gate gate;
  int cell = 0;
  ASSERT_EQ(launch_gated_write(writing, &gate, &cell, 1), CUDA_SUCCESS);
  ASSERT_EQ(memops().write32(writing, words, 7, CU_STREAM_WRITE_VALUE_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(memops().write64(writing, words + 8, 2, CU_STREAM_WRITE_VALUE_DEFAULT), CUDA_SUCCESS);
  settle();
  EXPECT_FALSE(flag_set(done32));  // the writes wait behind the gate
  gate.release();
  ASSERT_TRUE(eventually([&] { return flag_set(done32); }));
  ASSERT_EQ(api().streamSynchronize(writing), CUDA_SUCCESS);
  settle();
  EXPECT_FALSE(flag_set(done64));  // 2 is below kBig
  ASSERT_EQ(memops().write64(writing, words + 8, kBig, CU_STREAM_WRITE_VALUE_DEFAULT), CUDA_SUCCESS);
  ASSERT_TRUE(eventually([&] { return flag_set(done64); }));
  EXPECT_EQ(*reinterpret_cast<const std::uint32_t*>(words), 7u);
  EXPECT_EQ(*reinterpret_cast<const std::uint64_t*>(words + 8), kBig);
  ASSERT_EQ(api().streamSynchronize(waiting), CUDA_SUCCESS);
  api().streamDestroy(waiting);
  api().streamDestroy(writing);
  api().memFree(words);
}

TEST_F(SimTransfers, PerThreadWaitValueHoldsBackTheCallingThreadsStream) {
  void* host = nullptr;
  ASSERT_EQ(api().memAllocHost(&host, 64), CUDA_SUCCESS);
  const auto word = reinterpret_cast<CUdeviceptr>(host);
  host_store<std::uint32_t>(word, 0);
  int flag = 0;
  int* flag_ptr = &flag;
  void* params[] = {&flag_ptr};
  ASSERT_EQ(memops().wait32_ptsz(nullptr, word, 1, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
  ASSERT_EQ(
      entry<LaunchKernel>("cuLaunchKernel_ptsz")(set_flag_kernel(), 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
      CUDA_SUCCESS);
  settle();
  EXPECT_FALSE(flag_set(flag));
  CUstream writer = new_stream();
  ASSERT_EQ(memops().write32(writer, word, 1, 0), CUDA_SUCCESS);
  ASSERT_TRUE(eventually([&] { return flag_set(flag); }));
  ASSERT_EQ(api().streamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  api().streamDestroy(writer);
  api().memFreeHost(host);
}

TEST_F(SimTransfers, WaitConditionsFollowTheDriversDefinitions) {
  struct Case {
    const char* name;
    bool wide;                // the 64-bit operation
    std::uint64_t initial;    // held when the wait is queued
    std::uint64_t value;      // the operand
    unsigned flags;           // the condition
    bool at_once;             // the initial value satisfies it
    std::uint64_t not_yet;    // a later value that still does not
    std::uint64_t satisfies;  // a value that does
  };
  Case cases[] = {
      {"geq", false, 0xFFFFFFF0u, 0x10, CU_STREAM_WAIT_VALUE_GEQ, false, 0xFFFFFFFFu, 0x10},
      {"geq wraps", false, 0x10, 0xFFFFFFF0u, CU_STREAM_WAIT_VALUE_GEQ, true, 0, 0},
      {"geq flush", false, 0, 1, CU_STREAM_WAIT_VALUE_GEQ | CU_STREAM_WAIT_VALUE_FLUSH, false, 0, 2},
      {"eq", false, 3, 4, CU_STREAM_WAIT_VALUE_EQ, false, 5, 4},
      {"and", false, 0x4, 0x3, CU_STREAM_WAIT_VALUE_AND, false, 0x8, 0x2},
      {"nor", false, 0xF, 0xFFFFFFF0u, CU_STREAM_WAIT_VALUE_NOR, false, 0xFF, 0x7},
      {"geq 64", true, ~std::uint64_t{0} - 0xF, 0x10, CU_STREAM_WAIT_VALUE_GEQ, false, ~std::uint64_t{0},
       0x100000000ULL},
      {"eq 64", true, 0, 0x100000000ULL, CU_STREAM_WAIT_VALUE_EQ, false, 1, 0x100000000ULL},
      {"and 64", true, 0xFFFFFFFFu, 0xF00000000ULL, CU_STREAM_WAIT_VALUE_AND, false, 0x1, 0x100000000ULL},
      {"nor 64", true, ~std::uint64_t{0} - 0xF, 0xF, CU_STREAM_WAIT_VALUE_NOR, false, ~std::uint64_t{0},
       0x7FFFFFFFFFFFFFFFULL},
  };
  constexpr std::size_t kCases = sizeof cases / sizeof cases[0];
  int done[kCases] = {};
  CUstream streams[kCases] = {};
  void* host = nullptr;
  ASSERT_EQ(api().memAllocHost(&host, kCases * sizeof(std::uint64_t)), CUDA_SUCCESS);
  const auto slot = [&](std::size_t i) { return reinterpret_cast<CUdeviceptr>(host) + i * sizeof(std::uint64_t); };
  const auto store = [&](std::size_t i, std::uint64_t v) {
    if (cases[i].wide) {
      host_store<std::uint64_t>(slot(i), v);
    } else {
      host_store<std::uint32_t>(slot(i), static_cast<std::uint32_t>(v));
    }
  };
  for (std::size_t i = 0; i < kCases; ++i) {
    const Case& c = cases[i];
    store(i, c.initial);
    streams[i] = new_stream();
    const CUresult queued = c.wide ? memops().wait64(streams[i], slot(i), c.value, c.flags)
                                   : memops().wait32(streams[i], slot(i), static_cast<std::uint32_t>(c.value), c.flags);
    ASSERT_EQ(queued, CUDA_SUCCESS) << c.name;
    ASSERT_EQ(launch_set_flag(streams[i], &done[i]), CUDA_SUCCESS);
  }
  settle();
  for (std::size_t i = 0; i < kCases; ++i) {
    if (cases[i].at_once) {
      EXPECT_TRUE(eventually([&] { return flag_set(done[i]); })) << cases[i].name;
    } else {
      EXPECT_FALSE(flag_set(done[i])) << cases[i].name;
      store(i, cases[i].not_yet);
    }
  }
  settle();
  for (std::size_t i = 0; i < kCases; ++i) {
    if (cases[i].at_once) continue;
    EXPECT_FALSE(flag_set(done[i])) << cases[i].name << " after " << cases[i].not_yet;
    store(i, cases[i].satisfies);
  }
  bool all_done = true;
  for (std::size_t i = 0; i < kCases; ++i) {
    const bool ran = eventually([&] { return flag_set(done[i]); });
    EXPECT_TRUE(ran) << cases[i].name;
    all_done = all_done && ran;
  }
  ASSERT_TRUE(all_done);  // else a stream still waits on the memory, which must stay: leave it all be
  for (CUstream stream : streams) api().streamDestroy(stream);
  api().memFreeHost(host);
}

TEST_F(SimTransfers, StreamMemoryOperationsRefuseBadArguments) {
  void* host = nullptr;
  ASSERT_EQ(api().memAllocHost(&host, 64), CUDA_SUCCESS);
  const auto word = reinterpret_cast<CUdeviceptr>(host);
  host_store<std::uint64_t>(word, 0);
  std::uint64_t pageable = 0;
  const auto pageable_word = reinterpret_cast<CUdeviceptr>(&pageable);
  CUstream stream = new_stream();
  const MemOps& ops = memops();
  EXPECT_EQ(ops.wait32(stream, word, 0, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ops.wait32(stream, word, 0, 0x10), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ops.wait64(stream, word, 0, 7), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ops.wait32(stream, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ops.wait32(stream, pageable_word, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ops.wait32(stream, word + 2, 0, 0), CUDA_ERROR_INVALID_VALUE);  // misaligned
  EXPECT_EQ(ops.wait64(stream, word + 4, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ops.wait64(stream, word + 64, 0, 0), CUDA_ERROR_INVALID_VALUE);  // past the allocation
  EXPECT_EQ(ops.write32(stream, word, 1, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ops.write64(stream, word, 1, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ops.write64(stream, pageable_word, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ops.write32(stream, 0, 1, 0), CUDA_ERROR_INVALID_VALUE);
  const CUstream bogus = reinterpret_cast<CUstream>(std::uintptr_t{0x10});
  EXPECT_EQ(ops.wait32(bogus, word, 0, 0), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(pageable, 0u);  // nothing refused was queued
  EXPECT_EQ(*reinterpret_cast<const std::uint64_t*>(word), 0u);

  CUdeviceptr out = 0;
  EXPECT_EQ(ops.device_pointer(&out, host, 1), CUDA_ERROR_INVALID_VALUE);  // flags must be 0
  EXPECT_EQ(ops.device_pointer(&out, &pageable, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ops.device_pointer(nullptr, host, 0), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr device = 0;
  ASSERT_EQ(api().memAlloc(&device, 64), CUDA_SUCCESS);
  EXPECT_EQ(ops.device_pointer(&out, reinterpret_cast<void*>(device), 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(ops.device_pointer(&out, static_cast<char*>(host) + 8, 0), CUDA_SUCCESS);
  EXPECT_EQ(out, word + 8);

  for (const CUdevice_attribute attribute :
       {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
        CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1}) {
    int value = 0;
    ASSERT_EQ(api().deviceGetAttribute(&value, attribute, 0), CUDA_SUCCESS);
    EXPECT_EQ(value, 1) << attribute;
  }
  api().streamDestroy(stream);
  api().memFree(device);
  api().memFreeHost(host);
}

TEST_F(SimTransfers, GetProcAddressHandsOutTheV2MemoryOperationsAndTheLaunchVariants) {
  auto resolve = [&](const char* name, int version, cuuint64_t flags) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult found{};
    EXPECT_EQ(api().getProcAddress(name, &fn, version, flags, &found), CUDA_SUCCESS) << name << " " << version;
    return fn;
  };
  auto exported = [&](const char* symbol) {
    void* fn = ::dlsym(sim_driver().handle(), symbol);
    EXPECT_NE(fn, nullptr) << symbol;
    return fn;
  };
  constexpr cuuint64_t kDefault = CU_GET_PROC_ADDRESS_DEFAULT;
  constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  for (const char* op :
       {"cuStreamWaitValue32", "cuStreamWaitValue64", "cuStreamWriteValue32", "cuStreamWriteValue64"}) {
    const std::string v2 = std::string(op) + "_v2";
    EXPECT_EQ(resolve(op, 11070, kDefault), exported(v2.c_str()));
    EXPECT_EQ(resolve(op, 13000, kPerThread), exported((v2 + "_ptsz").c_str()));
  }
  EXPECT_EQ(resolve("cuLaunchKernel", 12000, kDefault), exported("cuLaunchKernel"));
  EXPECT_EQ(resolve("cuLaunchKernel", 12000, kPerThread), exported("cuLaunchKernel_ptsz"));
  EXPECT_EQ(resolve("cuLaunchKernelEx", 11060, kDefault), exported("cuLaunchKernelEx"));
  EXPECT_EQ(resolve("cuLaunchKernelEx", 12000, kPerThread), exported("cuLaunchKernelEx_ptsz"));
  EXPECT_EQ(resolve("cuMemHostGetDevicePointer", 12000, kDefault), exported("cuMemHostGetDevicePointer_v2"));
  EXPECT_EQ(resolve("cuStreamBatchMemOp", 12000, kDefault), exported("cuStreamBatchMemOp_v2"));
  EXPECT_EQ(resolve("cuStreamBatchMemOp", 12000, kPerThread), exported("cuStreamBatchMemOp_v2_ptsz"));
  EXPECT_EQ(resolve("cuMemcpyBatchAsync", 12080, kDefault), exported("cuMemcpyBatchAsync"));
  EXPECT_EQ(resolve("cuMemcpyBatchAsync", 12090, kPerThread), exported("cuMemcpyBatchAsync_ptsz"));
  EXPECT_EQ(resolve("cuMemcpyBatchAsync", 13000, kDefault), exported("cuMemcpyBatchAsync_v2"));
  EXPECT_EQ(resolve("cuMemcpyBatchAsync", 13000, kPerThread), exported("cuMemcpyBatchAsync_v2_ptsz"));
  EXPECT_EQ(resolve("cuMemcpy3DBatchAsync", 12080, kDefault), exported("cuMemcpy3DBatchAsync"));
  EXPECT_EQ(resolve("cuMemcpy3DBatchAsync", 12090, kPerThread), exported("cuMemcpy3DBatchAsync_ptsz"));
  EXPECT_EQ(resolve("cuMemcpy3DBatchAsync", 13000, kDefault), exported("cuMemcpy3DBatchAsync_v2"));
  EXPECT_EQ(resolve("cuMemcpy3DBatchAsync", 13000, kPerThread), exported("cuMemcpy3DBatchAsync_v2_ptsz"));
  EXPECT_EQ(resolve("cuMemcpyDtoA", 12000, kDefault), exported("cuMemcpyDtoA_v2"));
  EXPECT_EQ(resolve("cuMemcpyAtoD", 12000, kDefault), exported("cuMemcpyAtoD_v2"));
  EXPECT_EQ(resolve("cuArrayCreate", 12000, kDefault), exported("cuArrayCreate_v2"));
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found{};
  EXPECT_EQ(api().getProcAddress("cuLaunchKernelEx", &fn, 11000, kDefault, &found), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

// --- batches ------------------------------------------------------------------------------------------------

CUstreamBatchMemOpParams batch_write32(CUdeviceptr at, std::uint32_t value) {
  CUstreamBatchMemOpParams op{};
  op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  op.writeValue.address = at;
  op.writeValue.value = value;
  return op;
}

CUstreamBatchMemOpParams batch_wait32(CUdeviceptr at, std::uint32_t value) {
  CUstreamBatchMemOpParams op{};
  op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  op.waitValue.address = at;
  op.waitValue.value = value;
  op.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  return op;
}

// The operations run in the order given, behind the stream's earlier work;
// a wait inside the batch holds up the operations after it.
TEST_F(SimTransfers, BatchMemOpRunsItsOperationsInOrderOnItsStream) {
  const auto batch = entry<BatchMemOp>("cuStreamBatchMemOp_v2");
  void* host = nullptr;
  ASSERT_EQ(api().memAllocHost(&host, 64), CUDA_SUCCESS);
  const auto words = reinterpret_cast<CUdeviceptr>(host);
  host_store<std::uint64_t>(words, 0);
  host_store<std::uint64_t>(words + 8, 0);
  CUstream stream = new_stream();
  Gate gate;
  int cell = 0;
  ASSERT_EQ(launch_gated_write(stream, &gate, &cell, 1), CUDA_SUCCESS);
  CUstreamBatchMemOpParams ops[] = {batch_write32(words, 1), batch_wait32(words + 8, 5), batch_write32(words + 4, 2)};
  ASSERT_EQ(batch(stream, 3, ops, 0), CUDA_SUCCESS);
  ops[0] = batch_write32(words, 99);  // the caller's array is its own again
  settle();
  EXPECT_EQ(*reinterpret_cast<volatile std::uint32_t*>(words), 0u);  // behind the gate
  gate.release();
  ASSERT_TRUE(eventually([&] { return *reinterpret_cast<volatile std::uint32_t*>(words) == 1u; }));
  settle();
  EXPECT_EQ(*reinterpret_cast<volatile std::uint32_t*>(words + 4), 0u);  // behind the wait
  EXPECT_EQ(api().streamQuery(stream), CUDA_ERROR_NOT_READY);
  host_store<std::uint32_t>(words + 8, 5);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(*reinterpret_cast<volatile std::uint32_t*>(words + 4), 2u);
  EXPECT_EQ(*reinterpret_cast<volatile std::uint32_t*>(words), 1u);
  api().streamDestroy(stream);
  api().memFreeHost(host);
}

TEST_F(SimTransfers, BatchMemOpRefusesBadBatchesAndQueuesNothingOfThem) {
  const auto batch = entry<BatchMemOp>("cuStreamBatchMemOp_v2");
  void* host = nullptr;
  ASSERT_EQ(api().memAllocHost(&host, 64), CUDA_SUCCESS);
  const auto word = reinterpret_cast<CUdeviceptr>(host);
  host_store<std::uint64_t>(word, 0);
  CUstream stream = new_stream();
  CUstreamBatchMemOpParams ops[256];
  for (CUstreamBatchMemOpParams& op : ops) op = batch_write32(word, 7);
  EXPECT_EQ(batch(stream, 0, ops, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(batch(stream, 256, ops, 0), CUDA_ERROR_INVALID_VALUE);  // fewer than 256
  EXPECT_EQ(batch(stream, 1, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(batch(stream, 1, ops, 1), CUDA_ERROR_INVALID_VALUE);  // flags must be 0
  ops[1] = batch_write32(word + 2, 7);                            // misaligned, after a good one
  EXPECT_EQ(batch(stream, 2, ops, 0), CUDA_ERROR_INVALID_VALUE);
  ops[1] = batch_write32(word, 7);
  ops[1].writeValue.flags = CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER;  // the v1 ABI's only
  EXPECT_EQ(batch(stream, 2, ops, 0), CUDA_ERROR_INVALID_VALUE);
  ops[1] = batch_wait32(word, 0);
  ops[1].waitValue.flags = 0x10;
  EXPECT_EQ(batch(stream, 2, ops, 0), CUDA_ERROR_INVALID_VALUE);
  const unsigned bogus = 42;  // no enumerator: written as the raw tag a careless caller might
  std::memcpy(&ops[1], &bogus, sizeof bogus);
  EXPECT_EQ(batch(stream, 2, ops, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(*reinterpret_cast<volatile std::uint32_t*>(word), 0u);  // the good first write was not queued
  ops[1] = CUstreamBatchMemOpParams{};
  ops[1].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
  ops[2] = CUstreamBatchMemOpParams{};
  ops[2].flushRemoteWrites.operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
  ASSERT_EQ(batch(stream, 255, ops, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(*reinterpret_cast<volatile std::uint32_t*>(word), 7u);
  api().streamDestroy(stream);
  api().memFreeHost(host);
}

// cuMemcpyBatchAsync: every copy lands in stream order; a source read
// "during the API call" is read before it returns, one read "in stream
// order" when the copy runs.
TEST_F(SimTransfers, CopyBatchCopiesEachPairBehindItsStreamsEarlierWork) {
  const auto copy_batch = entry<CopyBatch>("cuMemcpyBatchAsync_v2");
  CUdeviceptr device = 0;
  ASSERT_EQ(api().memAlloc(&device, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(device, 0, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  CUdeviceptr staging = 0;
  ASSERT_EQ(api().memAlloc(&staging, 64), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(staging, 3, 64), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  std::vector<unsigned char> ephemeral(64, 1);
  CUstream stream = new_stream();
  Gate gate;
  int cell = 0;
  ASSERT_EQ(launch_gated_write(stream, &gate, &cell, 1), CUDA_SUCCESS);
  CUdeviceptr dsts[] = {device, device + 1024, device + 2048};
  CUdeviceptr srcs[] = {reinterpret_cast<CUdeviceptr>(ephemeral.data()), staging, staging};
  std::size_t sizes[] = {64, 64, 0};
  CUmemcpyAttributes attrs[2] = {};
  attrs[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
  attrs[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  std::size_t idxs[] = {0, 1};
  ASSERT_EQ(copy_batch(dsts, srcs, sizes, 3, attrs, idxs, 2, stream), CUDA_SUCCESS);
  std::fill(ephemeral.begin(), ephemeral.end(), 9);  // read already
  settle();
  EXPECT_EQ(*reinterpret_cast<const unsigned char*>(device), 0);  // behind the gate
  // The sim's device memory is the host's: a store the device sees at once.
  std::memset(reinterpret_cast<void*>(staging), 4, 64);
  gate.release();
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  const auto* bytes = reinterpret_cast<const unsigned char*>(device);
  EXPECT_EQ(std::count(bytes, bytes + 64, 1), 64);
  EXPECT_EQ(std::count(bytes + 64, bytes + 1024, 0), 1024 - 64);
  EXPECT_EQ(std::count(bytes + 1024, bytes + 1088, 4), 64);  // read when it ran
  EXPECT_EQ(bytes[2048], 0);
  api().streamDestroy(stream);
  api().memFree(staging);
  api().memFree(device);
}

TEST_F(SimTransfers, CopyBatchRefusesTheLegacyStreamAndBadAttributesAndNamesTheFailedCopy) {
  const auto copy_batch = entry<CopyBatch>("cuMemcpyBatchAsync_v2");
  const auto copy_batch_v1 = entry<CopyBatchV1>("cuMemcpyBatchAsync");
  CUdeviceptr device = 0;
  ASSERT_EQ(api().memAlloc(&device, 256), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(device, 0, 256), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  std::vector<unsigned char> source(64, 5);
  CUstream stream = new_stream();
  CUdeviceptr dsts[] = {device, device + 64};
  CUdeviceptr srcs[] = {reinterpret_cast<CUdeviceptr>(source.data()), reinterpret_cast<CUdeviceptr>(source.data())};
  std::size_t sizes[] = {64, 64};
  CUmemcpyAttributes attrs[2] = {};
  attrs[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  attrs[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
  std::size_t idxs[] = {0, 1};
  EXPECT_EQ(copy_batch(dsts, srcs, sizes, 2, attrs, idxs, 1, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(copy_batch(dsts, srcs, sizes, 2, attrs, idxs, 1, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(copy_batch(dsts, srcs, sizes, 0, attrs, idxs, 1, stream), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(copy_batch(dsts, srcs, sizes, 2, attrs, idxs, 0, stream), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(copy_batch(dsts, srcs, sizes, 1, attrs, idxs, 2, stream), CUDA_ERROR_INVALID_VALUE);  // more than copies
  std::size_t late[] = {1, 1};
  EXPECT_EQ(copy_batch(dsts, srcs, sizes, 2, attrs, late, 1, stream), CUDA_ERROR_INVALID_VALUE);  // not from 0
  std::size_t same[] = {0, 0};
  EXPECT_EQ(copy_batch(dsts, srcs, sizes, 2, attrs, same, 2, stream), CUDA_ERROR_INVALID_VALUE);
  CUmemcpyAttributes no_order[1] = {};
  EXPECT_EQ(copy_batch(dsts, srcs, sizes, 2, no_order, idxs, 1, stream), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(copy_batch(dsts, srcs, sizes, 2, nullptr, idxs, 1, stream), CUDA_ERROR_INVALID_VALUE);
  // CUDA 12.8's form says which copy failed, or SIZE_MAX for the batch.
  CUdeviceptr holes[] = {device, 0};
  std::size_t failed = 0;
  EXPECT_EQ(copy_batch_v1(holes, srcs, sizes, 2, attrs, idxs, 2, &failed, stream), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(failed, 1u);
  EXPECT_EQ(copy_batch_v1(dsts, srcs, sizes, 2, attrs, idxs, 2, &failed, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(failed, SIZE_MAX);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  const auto* bytes = reinterpret_cast<const unsigned char*>(device);
  EXPECT_EQ(std::count(bytes, bytes + 256, 0), 256);  // nothing refused was queued
  ASSERT_EQ(copy_batch_v1(dsts, srcs, sizes, 2, attrs, idxs, 2, &failed, stream), CUDA_SUCCESS);
  EXPECT_EQ(failed, SIZE_MAX);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(std::count(bytes, bytes + 128, 5), 128);
  api().streamDestroy(stream);
  api().memFree(device);
}

// A source read "during the API call" is read by the driver before it
// returns. Where that source is device VA with nothing mapped, the read
// faults as a GPU's would, the call says which copy failed, and that copy
// is not queued; the batch's earlier copies are.
TEST_F(SimTransfers, CopyBatchReadingAnUnmappedSourceDuringTheCallFaultsAndQueuesNothing) {
  const auto copy_batch_v1 = entry<CopyBatchV1>("cuMemcpyBatchAsync");
  const auto unmapped_faults = sim_control<std::uint64_t (*)()>("tidepool_sim_unmapped_faults");
  CUdeviceptr device = 0;
  ASSERT_EQ(api().memAlloc(&device, 256), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(device, 0, 256), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  CUdeviceptr nothing_mapped = 0;
  ASSERT_EQ(api().memAddressReserve(&nothing_mapped, page_, 0, 0, 0), CUDA_SUCCESS);
  std::vector<unsigned char> source(64, 5);
  CUstream stream = new_stream();
  CUdeviceptr dsts[] = {device, device + 64};
  CUdeviceptr srcs[] = {reinterpret_cast<CUdeviceptr>(source.data()), nothing_mapped};
  std::size_t sizes[] = {64, 64};
  CUmemcpyAttributes attrs[1] = {};
  attrs[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
  std::size_t idxs[] = {0};
  std::size_t failed = 0;
  EXPECT_EQ(copy_batch_v1(dsts, srcs, sizes, 2, attrs, idxs, 1, &failed, stream), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(failed, 1u);
  EXPECT_EQ(unmapped_faults(), 1u);
  EXPECT_EQ(api().streamSynchronize(stream), CUDA_ERROR_ILLEGAL_ADDRESS) << "the fault is sticky";
  const auto* bytes = reinterpret_cast<const unsigned char*>(device);
  EXPECT_EQ(std::count(bytes + 64, bytes + 128, 0), 64) << "the faulted copy was not queued";
  api().streamDestroy(stream);
  api().memAddressFree(nothing_mapped, page_);
  api().memFree(device);
}

// --- CUDA arrays ------------------------------------------------------------------------------------------------

using ArrayCreate = decltype(&::cuArrayCreate_v2);
using ArrayDestroy = decltype(&::cuArrayDestroy);
using ArrayGetDescriptor = decltype(&::cuArrayGetDescriptor_v2);
using CopyDtoA = decltype(&::cuMemcpyDtoA_v2);
using CopyAtoD = decltype(&::cuMemcpyAtoD_v2);
using CopyHtoA = decltype(&::cuMemcpyHtoA_v2);
using CopyAtoH = decltype(&::cuMemcpyAtoH_v2);
using Copy3DBatch = decltype(&::cuMemcpy3DBatchAsync_v2);
using Copy3DBatchV1 = CUresult (*)(std::size_t, CUDA_MEMCPY3D_BATCH_OP*, std::size_t*, unsigned long long, CUstream);

CUarray make_array(std::size_t width, std::size_t height, CUarray_format format, unsigned channels) {
  const CUDA_ARRAY_DESCRIPTOR d = testing::array_descriptor(width, height, format, channels);
  CUarray array = nullptr;
  EXPECT_EQ(entry<ArrayCreate>("cuArrayCreate_v2")(&array, &d), CUDA_SUCCESS);
  return array;
}

// An array is device memory no pointer reaches: its bytes go in and out
// only through array copies, within its bounds, and its handle is no
// allocation to free or ask about.
TEST_F(SimTransfers, AnArrayHoldsItsBytesAndIsReachedOnlyThroughArrayCopies) {
  const auto destroy = entry<ArrayDestroy>("cuArrayDestroy");
  const auto to_array = entry<CopyDtoA>("cuMemcpyDtoA_v2");
  const auto from_array = entry<CopyAtoD>("cuMemcpyAtoD_v2");
  const auto host_to_array = entry<CopyHtoA>("cuMemcpyHtoA_v2");
  const auto array_to_host = entry<CopyAtoH>("cuMemcpyAtoH_v2");
  std::size_t free_before = 0;
  std::size_t total = 0;
  ASSERT_EQ(api().memGetInfo(&free_before, &total), CUDA_SUCCESS);
  constexpr std::size_t kWidth = 4096;  // 4-byte elements: 16 KiB
  CUarray array = make_array(kWidth, 0, CU_AD_FORMAT_FLOAT, 1);
  ASSERT_NE(array, nullptr);
  std::size_t free_after = 0;
  ASSERT_EQ(api().memGetInfo(&free_after, &total), CUDA_SUCCESS);
  EXPECT_GE(free_before - free_after, kWidth * 4) << "an array takes device memory";
  CUDA_ARRAY_DESCRIPTOR d{};
  ASSERT_EQ(entry<ArrayGetDescriptor>("cuArrayGetDescriptor_v2")(&d, array), CUDA_SUCCESS);
  EXPECT_EQ(d.Width, kWidth);
  EXPECT_EQ(d.Height, 0u);
  EXPECT_EQ(d.Format, CU_AD_FORMAT_FLOAT);

  std::vector<std::uint32_t> words(kWidth);
  for (std::size_t i = 0; i < kWidth; ++i) words[i] = static_cast<std::uint32_t>(i * 2654435761u);
  ASSERT_EQ(host_to_array(array, 0, words.data(), kWidth * 4), CUDA_SUCCESS);
  CUdeviceptr device = 0;
  ASSERT_EQ(api().memAlloc(&device, kWidth * 4), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(device, 0, kWidth * 4), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  ASSERT_EQ(from_array(device + 64, array, 64, kWidth * 4 - 128), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // an array copy does not wait on the host
  const auto* got = reinterpret_cast<const std::uint32_t*>(device);
  EXPECT_EQ(got[0], 0u);
  EXPECT_TRUE(std::equal(words.begin() + 16, words.end() - 16, got + 16));
  EXPECT_EQ(got[kWidth - 1], 0u);
  // Device memory in, read back through the host.
  ASSERT_EQ(api().memsetD8(device, 0x3c, kWidth * 4), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  ASSERT_EQ(to_array(array, 4, device, 8), CUDA_SUCCESS);
  std::vector<std::uint32_t> back(kWidth);
  ASSERT_EQ(array_to_host(back.data(), array, 0, kWidth * 4), CUDA_SUCCESS);
  EXPECT_EQ(back[0], words[0]);
  EXPECT_EQ(back[1], 0x3c3c3c3cu);
  EXPECT_EQ(back[2], 0x3c3c3c3cu);
  EXPECT_EQ(back[3], words[3]);

  EXPECT_EQ(to_array(array, kWidth * 4 - 4, device, 8), CUDA_ERROR_INVALID_VALUE) << "past its end";
  EXPECT_EQ(from_array(device, array, kWidth * 4 + 4, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().memFree(reinterpret_cast<CUdeviceptr>(array)), CUDA_ERROR_INVALID_VALUE);
  CUmemorytype type{};
  EXPECT_NE(api().pointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(array)),
            CUDA_SUCCESS);
  CUarray flat = make_array(64, 64, CU_AD_FORMAT_UNSIGNED_INT8, 4);
  EXPECT_EQ(to_array(flat, 0, device, 16), CUDA_ERROR_INVALID_VALUE) << "a linear copy needs a 1D array";
  EXPECT_EQ(destroy(flat), CUDA_SUCCESS);
  EXPECT_EQ(destroy(array), CUDA_SUCCESS);
  EXPECT_EQ(destroy(array), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(to_array(array, 0, device, 16), CUDA_ERROR_INVALID_HANDLE);
  CUDA_ARRAY_DESCRIPTOR bad{};
  bad.Width = 16;
  bad.Format = CU_AD_FORMAT_FLOAT;
  bad.NumChannels = 3;
  CUarray refused = nullptr;
  EXPECT_EQ(entry<ArrayCreate>("cuArrayCreate_v2")(&refused, &bad), CUDA_ERROR_INVALID_VALUE);
  api().memFree(device);
  ASSERT_EQ(api().memGetInfo(&free_after, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_after, free_before) << "a destroyed array gives its memory back";
}

using testing::array_operand;
using testing::pointer_operand;

CUDA_MEMCPY3D_BATCH_OP batch_op(CUmemcpy3DOperand src, CUmemcpy3DOperand dst, CUextent3D extent) {
  CUDA_MEMCPY3D_BATCH_OP op{};
  op.src = src;
  op.dst = dst;
  op.extent = extent;
  op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  return op;
}

// Whether `call` returned while the legacy stream's earlier work was held
// behind a gated kernel: waited for at most `eventually`'s bound when it
// should return at once (`at_once`), or settle()'s time when it should
// not. The gate is released and the call's result checked before this
// returns, so each case leaves the legacy stream idle.
bool returned_while_held(const std::function<CUresult()>& call, bool at_once) {
  CUcontext context = nullptr;
  EXPECT_EQ(api().ctxGetCurrent(&context), CUDA_SUCCESS);
  testing::Gate gate;
  int cell = 0;
  EXPECT_EQ(launch_gated_write(nullptr, &gate, &cell, 1), CUDA_SUCCESS);
  std::atomic<int> returned{0};
  CUresult result = CUDA_ERROR_UNKNOWN;
  std::thread caller([&] {
    EXPECT_EQ(api().ctxSetCurrent(context), CUDA_SUCCESS);
    result = call();
    returned.store(1);
  });
  bool early = false;
  if (at_once) {
    early = eventually([&] { return returned.load() != 0; });
  } else {
    settle();
    early = returned.load() != 0;
  }
  gate.release();
  caller.join();
  EXPECT_EQ(result, CUDA_SUCCESS);
  EXPECT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);
  return early;
}

// The synchronous copies and sets wait on the host as the driver's "API
// synchronization behavior" says, by each end's memory type: between
// device memory and arrays, and a set on device memory, not at all; to
// host memory, from pinned memory, or a set on pinned memory, until done;
// from pageable memory until the earlier work is done and the source is
// staged, so the program may then reuse it.
TEST_F(SimTransfers, SynchronousCopiesAndSetsWaitOnTheHostOnlyWhereTheDriverSaysTheyDo) {
  const auto to_array = entry<CopyDtoA>("cuMemcpyDtoA_v2");
  const auto from_array = entry<CopyAtoD>("cuMemcpyAtoD_v2");
  const auto array_to_host = entry<CopyAtoH>("cuMemcpyAtoH_v2");
  constexpr std::size_t kBytes = 4096;
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  ASSERT_EQ(api().memAlloc(&a, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(api().memAlloc(&b, kBytes), CUDA_SUCCESS);
  void* pinned = nullptr;
  ASSERT_EQ(api().memAllocHost(&pinned, kBytes), CUDA_SUCCESS);
  const auto pinned_at = reinterpret_cast<CUdeviceptr>(pinned);
  CUarray array = make_array(kBytes / 4, 0, CU_AD_FORMAT_FLOAT, 1);
  ASSERT_NE(array, nullptr);
  std::vector<unsigned char> pageable(kBytes, 9);

  EXPECT_TRUE(returned_while_held([&] { return api().memsetD8(a, 3, kBytes); }, true));
  EXPECT_TRUE(returned_while_held([&] { return api().memcpyDtoD(b, a, kBytes); }, true));
  EXPECT_TRUE(returned_while_held([&] { return api().memcpy(b, a, kBytes); }, true));
  EXPECT_TRUE(returned_while_held([&] { return to_array(array, 0, a, kBytes); }, true));
  EXPECT_TRUE(returned_while_held([&] { return from_array(b, array, 0, kBytes); }, true));
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(b)[kBytes - 1], 3);

  EXPECT_FALSE(returned_while_held([&] { return api().memcpyDtoH(pageable.data(), a, kBytes); }, false));
  EXPECT_EQ(pageable[kBytes - 1], 3);
  EXPECT_FALSE(returned_while_held([&] { return api().memcpy(pinned_at, a, kBytes); }, false));
  EXPECT_FALSE(returned_while_held([&] { return api().memsetD8(pinned_at, 5, kBytes); }, false));
  EXPECT_EQ(static_cast<const unsigned char*>(pinned)[kBytes - 1], 5);
  EXPECT_FALSE(returned_while_held([&] { return api().memcpyHtoD(b, pinned, kBytes); }, false));
  EXPECT_FALSE(returned_while_held([&] { return array_to_host(pageable.data(), array, 0, kBytes); }, false));
  std::fill(pageable.begin(), pageable.end(), 9);
  EXPECT_FALSE(returned_while_held(
      [&] {
        const CUresult r = api().memcpyHtoD(b, pageable.data(), kBytes);
        pageable.assign(kBytes, 1);  // staged: the copy takes the bytes of the call
        return r;
      },
      false));
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(b)[kBytes - 1], 9);

  EXPECT_EQ(entry<ArrayDestroy>("cuArrayDestroy")(array), CUDA_SUCCESS);
  api().memFreeHost(pinned);
  api().memFree(a);
  api().memFree(b);
}

// cuMemcpy3DBatchAsync: pitched regions between pointers (bytes) and into
// and out of a 2D array (its elements), all behind the stream's earlier work.
TEST_F(SimTransfers, A3DBatchCopiesPitchedRegionsBetweenPointersAndArraysInStreamOrder) {
  const auto copy = entry<Copy3DBatch>("cuMemcpy3DBatchAsync_v2");
  constexpr std::size_t kRow = 64;  // bytes per source row
  CUdeviceptr src = 0;
  CUdeviceptr dst = 0;
  CUdeviceptr out = 0;
  ASSERT_EQ(api().memAlloc(&src, kRow * 8 * 2), CUDA_SUCCESS);  // 8 rows, 2 layers
  ASSERT_EQ(api().memAlloc(&dst, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().memAlloc(&out, 4096), CUDA_SUCCESS);
  auto* s = reinterpret_cast<unsigned char*>(src);
  for (std::size_t i = 0; i < kRow * 16; ++i) s[i] = static_cast<unsigned char>(i % 251 + 1);  // never 0
  ASSERT_EQ(api().memsetD8(dst, 0, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(out, 0, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);           // a set returns before it runs
  CUarray array = make_array(16, 16, CU_AD_FORMAT_UNSIGNED_INT16, 2);  // 4-byte elements, 64-byte rows
  ASSERT_NE(array, nullptr);
  CUstream stream = new_stream();
  Gate gate;
  int cell = 0;
  ASSERT_EQ(launch_gated_write(stream, &gate, &cell, 1), CUDA_SUCCESS);
  CUDA_MEMCPY3D_BATCH_OP ops[] = {
      // 10 bytes of rows 0..3 of both layers into rows of 16 bytes, 4 rows a layer.
      batch_op(pointer_operand(src, kRow, 8), pointer_operand(dst, 16, 4), CUextent3D{10, 4, 2}),
      // Rows 1..2 of the source (3 elements of 4 bytes each) into the array at (2, 5).
      batch_op(pointer_operand(src + kRow, kRow / 4, 0), array_operand(array, 2, 5), CUextent3D{3, 2, 1}),
  };
  ASSERT_EQ(copy(2, ops, 0, stream), CUDA_SUCCESS);
  // And back out of the array, tightly packed: a batch of its own, since
  // the copies of one batch have no order among them.
  CUDA_MEMCPY3D_BATCH_OP back[] = {batch_op(array_operand(array, 2, 5), pointer_operand(out, 0, 0), {3, 2, 1})};
  ASSERT_EQ(copy(1, back, 0, stream), CUDA_SUCCESS);
  settle();
  const auto* d = reinterpret_cast<const unsigned char*>(dst);
  EXPECT_EQ(d[0], 0) << "ran before the stream's earlier work";
  gate.release();
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  std::size_t wrong = 0;
  for (std::size_t z = 0; z < 2; ++z) {
    for (std::size_t y = 0; y < 4; ++y) {
      for (std::size_t x = 0; x < 16; ++x) {
        const unsigned char want = x < 10 ? s[z * kRow * 8 + y * kRow + x] : 0;
        wrong += d[z * 64 + y * 16 + x] != want ? 1 : 0;
      }
    }
  }
  EXPECT_EQ(wrong, 0u);
  const auto* o = reinterpret_cast<const unsigned char*>(out);
  for (std::size_t y = 0; y < 2; ++y) {
    EXPECT_TRUE(std::equal(o + y * 12, o + y * 12 + 12, s + (1 + y) * kRow)) << "row " << y;
  }
  EXPECT_EQ(o[24], 0);
  api().streamDestroy(stream);
  EXPECT_EQ(entry<ArrayDestroy>("cuArrayDestroy")(array), CUDA_SUCCESS);
  for (CUdeviceptr p : {src, dst, out}) api().memFree(p);
}

TEST_F(SimTransfers, A3DBatchRefusesBadOperationsBeforeQueuingAnyAndNamesTheFailedOne) {
  const auto copy = entry<Copy3DBatch>("cuMemcpy3DBatchAsync_v2");
  const auto copy_v1 = entry<Copy3DBatchV1>("cuMemcpy3DBatchAsync");
  CUdeviceptr device = 0;
  ASSERT_EQ(api().memAlloc(&device, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(device, 0, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  std::vector<unsigned char> source(256, 7);
  const auto host = reinterpret_cast<CUdeviceptr>(source.data());
  CUarray bytes = make_array(8, 8, CU_AD_FORMAT_UNSIGNED_INT8, 1);
  CUarray words = make_array(8, 8, CU_AD_FORMAT_FLOAT, 1);
  CUstream stream = new_stream();
  const CUDA_MEMCPY3D_BATCH_OP good = batch_op(pointer_operand(host, 0, 0), pointer_operand(device, 0, 0), {64, 1, 1});
  const auto with = [&](auto change) {
    CUDA_MEMCPY3D_BATCH_OP op = good;
    change(op);
    return op;
  };
  const CUDA_MEMCPY3D_BATCH_OP bad[] = {
      with([](CUDA_MEMCPY3D_BATCH_OP& op) { op.extent.depth = 0; }),
      with([](CUDA_MEMCPY3D_BATCH_OP& op) { op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_INVALID; }),
      with([](CUDA_MEMCPY3D_BATCH_OP& op) { op.dst.op.ptr.rowLength = 32; }),  // below the width
      with([](CUDA_MEMCPY3D_BATCH_OP& op) { op.src.type = CU_MEMCPY_OPERAND_TYPE_MAX; }),
      with([](CUDA_MEMCPY3D_BATCH_OP& op) { op.flags = 0x80; }),
      with([&](CUDA_MEMCPY3D_BATCH_OP& op) {  // a span past the end of the address space
        op.src.op.ptr.rowLength = UINTPTR_MAX - host + 1;
      }),
      with([&](CUDA_MEMCPY3D_BATCH_OP& op) {  // past the array's last row
        op.dst = array_operand(bytes, 0, 4);
        op.extent = {8, 5, 1};
      }),
      with([&](CUDA_MEMCPY3D_BATCH_OP& op) {  // elements of 1 and 4 bytes
        op.src = array_operand(bytes, 0, 0);
        op.dst = array_operand(words, 0, 0);
        op.extent = {2, 1, 1};
      }),
  };
  for (std::size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    CUDA_MEMCPY3D_BATCH_OP ops[] = {good, bad[i]};
    std::size_t failed = 0;
    EXPECT_EQ(copy_v1(2, ops, &failed, 0, stream), CUDA_ERROR_INVALID_VALUE) << i;
    EXPECT_EQ(failed, 1u) << i;
    EXPECT_EQ(copy(2, ops, 0, stream), CUDA_ERROR_INVALID_VALUE) << i;
  }
  CUDA_MEMCPY3D_BATCH_OP ops[] = {good};
  EXPECT_EQ(copy(1, ops, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(copy(1, ops, 0, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(copy(1, ops, 1, stream), CUDA_ERROR_INVALID_VALUE) << "flags are for the future";
  EXPECT_EQ(copy(0, ops, 0, stream), CUDA_ERROR_INVALID_VALUE);
  std::size_t failed = 0;
  EXPECT_EQ(copy_v1(1, ops, &failed, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(failed, SIZE_MAX);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  const auto* d = reinterpret_cast<const unsigned char*>(device);
  EXPECT_EQ(std::count(d, d + 4096, 0), 4096) << "a refused batch queued a copy";
  ASSERT_EQ(copy_v1(1, ops, &failed, 0, stream), CUDA_SUCCESS);
  EXPECT_EQ(failed, SIZE_MAX);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(std::count(d, d + 64, 7), 64);
  api().streamDestroy(stream);
  for (CUarray a : {bytes, words}) EXPECT_EQ(entry<ArrayDestroy>("cuArrayDestroy")(a), CUDA_SUCCESS);
  api().memFree(device);
}

// --- children: the environment, and exit -----------------------------------------------------------------

// This binary run again with TIDEPOOL_SIM_MEMOPS_CHILD set does what it names
// before main and exits: 0 when all went as the parent test expects.
int run_child(const std::string& mode) {
  const driver::Api& a = sim_driver().api();
  CUcontext context = nullptr;
  if (a.init(0) != CUDA_SUCCESS || a.devicePrimaryCtxRetain(&context, 0) != CUDA_SUCCESS ||
      a.ctxSetCurrent(context) != CUDA_SUCCESS) {
    return 3;
  }
  if (mode == "copy") {
    // TIDEPOOL_SIM_COPY_GBPS=1: 64 MiB takes 67 ms. A bad value: unlimited,
    // where the 1e-6 GB/s it almost says would take days (the alarm fires).
    const std::size_t bytes = std::getenv("TIDEPOOL_SIM_COPY_GBPS")[0] == '1' ? 64 * kMiB : kMiB;
    CUdeviceptr device = 0;
    if (a.memAlloc(&device, bytes) != CUDA_SUCCESS || a.memsetD8(device, 0, bytes) != CUDA_SUCCESS) return 4;
    std::vector<unsigned char> host(bytes, 1);
    const auto t0 = Clock::now();
    if (a.memcpyHtoD(device, host.data(), bytes) != CUDA_SUCCESS) return 5;
    // From pageable memory the call returns once the source is staged.
    if (a.streamSynchronize(nullptr) != CUDA_SUCCESS) return 8;
    if (copied(true) != bytes) return 6;
    if (bytes == 64 * kMiB && ms_since(t0) < 60.0) return 7;
    return 0;
  }
  if (mode == "exit") {
    // Streams left waiting for good, one destroyed, one the per-thread
    // stream, one sleeping through a copy at a bandwidth of days.
    void* host = nullptr;
    CUstream destroyed = nullptr;
    CUstream copying = nullptr;
    CUevent event = nullptr;
    CUdeviceptr device = 0;
    if (a.memAllocHost(&host, 64) != CUDA_SUCCESS || a.memAlloc(&device, kMiB) != CUDA_SUCCESS ||
        a.streamCreate(&destroyed, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        a.streamCreate(&copying, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS || a.eventCreate(&event, 0) != CUDA_SUCCESS) {
      return 4;
    }
    const auto word = reinterpret_cast<CUdeviceptr>(host);
    host_store<std::uint32_t>(word, 0);
    if (memops().wait32(destroyed, word, 1, CU_STREAM_WAIT_VALUE_EQ) != CUDA_SUCCESS ||
        a.eventRecord(event, destroyed) != CUDA_SUCCESS || a.eventDestroy(event) != CUDA_SUCCESS ||
        a.streamDestroy(destroyed) != CUDA_SUCCESS ||
        memops().wait32_ptsz(nullptr, word, 1, CU_STREAM_WAIT_VALUE_EQ) != CUDA_SUCCESS) {
      return 5;
    }
    set_copy_gbps(1e-6);
    static std::vector<unsigned char> source(kMiB);
    if (a.memcpyHtoDAsync(device, source.data(), kMiB, copying) != CUDA_SUCCESS) return 6;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the workers are now inside the sim
    return 0;
  }
  return 2;
}

[[maybe_unused]] const bool kChild = [] {
  const char* mode = std::getenv("TIDEPOOL_SIM_MEMOPS_CHILD");
  if (mode == nullptr) return false;
  alarm(20);                   // a hang dies of SIGALRM
  std::exit(run_child(mode));  // static destructors run while workers still wait
}();

struct ChildResult {
  int status = -1;
  std::string out;  // what it wrote on stdout
};

ChildResult spawn_child(const char* mode, const char* gbps) {
  std::vector<std::string> env_strings{std::string("TIDEPOOL_SIM_MEMOPS_CHILD=") + mode};
  if (gbps != nullptr) env_strings.push_back(std::string("TIDEPOOL_SIM_COPY_GBPS=") + gbps);
  for (char** e = ::environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "TIDEPOOL_SIM_COPY_GBPS=", 23) != 0) env_strings.emplace_back(*e);
  }
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  int pipe_fds[2];
  ChildResult result;
  if (::pipe(pipe_fds) != 0) return result;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::string self = "/proc/self/exe";
  char* argv[] = {self.data(), nullptr};
  pid_t child = 0;
  const int spawned = posix_spawn(&child, "/proc/self/exe", &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawned == 0) {
    char buffer[256];
    for (ssize_t n = 0; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;)
      result.out.append(buffer, static_cast<std::size_t>(n));
    ::waitpid(child, &result.status, 0);
  }
  ::close(pipe_fds[0]);
  return result;
}

TEST(SimTransferEnvironment, CopyBandwidthComesFromTheEnvironmentAndABadValueIsIgnoredSilently) {
  const ChildResult limited = spawn_child("copy", "1");
  ASSERT_TRUE(WIFEXITED(limited.status)) << "killed by signal " << WTERMSIG(limited.status);
  EXPECT_EQ(WEXITSTATUS(limited.status), 0);
  // 1e-6 GB/s with trailing junk: not a bandwidth, so copies are unlimited.
  const ChildResult ignored = spawn_child("copy", "0.000001x");
  ASSERT_TRUE(WIFEXITED(ignored.status)) << "killed by signal " << WTERMSIG(ignored.status);
  EXPECT_EQ(WEXITSTATUS(ignored.status), 0);
  EXPECT_EQ(ignored.out, "");
}

TEST(SimTransferEnvironment, ExitWhileStreamsWaitOnMemoryOrSleepThroughACopyIsClean) {
  const ChildResult result = spawn_child("exit", nullptr);
  ASSERT_TRUE(WIFEXITED(result.status)) << "killed by signal " << WTERMSIG(result.status);
  EXPECT_EQ(WEXITSTATUS(result.status), 0);
}

}  // namespace
}  // namespace tidepool
