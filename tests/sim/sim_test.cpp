// Specification of the simulated driver's semantics, exercised through the
// driver table exactly as tidepool calls it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <mutex>

#include "sim/sim_control.h"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"

namespace tidepool {
namespace {

using testing::Gate;
using testing::gated_write_kernel;
using testing::launch_gated_write;
using testing::sim_control;
using testing::sim_driver;

// Sanitizer runtimes catch SIGSEGV and abort; the child must die of the fault
// itself for the test to see what the hardware would report.
void fault_with_default_handler() {
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, nullptr);
  sigaction(SIGBUS, &action, nullptr);
}

class Sim : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(api().init(0), CUDA_SUCCESS);
    ASSERT_EQ(api().deviceGet(&device_, 0), CUDA_SUCCESS);
    ASSERT_EQ(api().devicePrimaryCtxRetain(&context_, device_), CUDA_SUCCESS);
    ASSERT_EQ(api().ctxSetCurrent(context_), CUDA_SUCCESS);
    api().memGetAllocationGranularity(&page_, &device_prop(), CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  }
  void TearDown() override {
    sim_control<void (*)()>("tidepool_sim_clear_faults")();
    api().devicePrimaryCtxRelease(device_);
  }
  static const driver::Api& api() { return sim_driver().api(); }
  CUmemAllocationProp& device_prop() {
    prop_ = {};
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = 0;
    return prop_;
  }
  CUmemGenericAllocationHandle create_page(CUmemLocationType where = CU_MEM_LOCATION_TYPE_DEVICE) {
    CUmemAllocationProp prop = device_prop();
    prop.location.type = where;
    CUmemGenericAllocationHandle h = 0;
    EXPECT_EQ(api().memCreate(&h, page_, &prop, 0), CUDA_SUCCESS);
    return h;
  }
  void map_rw(CUdeviceptr at, CUmemGenericAllocationHandle h) {
    ASSERT_EQ(api().memMap(at, page_, 0, h, 0), CUDA_SUCCESS);
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ASSERT_EQ(api().memSetAccess(at, page_, &access, 1), CUDA_SUCCESS);
  }

  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  std::size_t page_ = 0;
  CUmemAllocationProp prop_{};
};

TEST_F(Sim, UnmappedReservationFaults) {
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, 2 * page_, 0, 0, 0), CUDA_SUCCESS);
  const pid_t child = fork();
  if (child == 0) {
    fault_with_default_handler();
    *reinterpret_cast<volatile char*>(va) = 1;  // must fault: nothing is mapped
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  EXPECT_EQ(api().memAddressFree(va, 2 * page_), CUDA_SUCCESS);
}

TEST_F(Sim, MappedButNotYetAccessibleFaults) {
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, page_, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h = create_page();
  ASSERT_EQ(api().memMap(va, page_, 0, h, 0), CUDA_SUCCESS);
  const pid_t child = fork();
  if (child == 0) {
    fault_with_default_handler();
    *reinterpret_cast<volatile char*>(va) = 1;
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  EXPECT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(va, page_), CUDA_SUCCESS);
}

TEST_F(Sim, ContentsSurviveRemapAtAnotherAddress) {
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  ASSERT_EQ(api().memAddressReserve(&a, page_, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().memAddressReserve(&b, page_, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h = create_page();
  map_rw(a, h);
  std::memcpy(reinterpret_cast<void*>(a), "tidepool", 9);
  // The same physical page seen at two addresses at once, then only at b.
  map_rw(b, h);
  EXPECT_STREQ(reinterpret_cast<const char*>(b), "tidepool");
  ASSERT_EQ(api().memUnmap(a, page_), CUDA_SUCCESS);
  ASSERT_EQ(api().memRelease(h), CUDA_SUCCESS);  // still mapped at b: stays alive
  EXPECT_STREQ(reinterpret_cast<const char*>(b), "tidepool");
  ASSERT_EQ(api().memUnmap(b, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(a, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(b, page_), CUDA_SUCCESS);
}

TEST_F(Sim, MappingRulesMatchTheDriver) {
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, 2 * page_, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h = create_page();
  EXPECT_EQ(api().memMap(va + 4096, page_, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // unaligned
  EXPECT_EQ(api().memMap(va, 2 * page_, 0, h, 0), CUDA_ERROR_INVALID_VALUE);     // larger than the handle
  ASSERT_EQ(api().memMap(va, page_, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(api().memMap(va, page_, 0, h, 0), CUDA_ERROR_ALREADY_MAPPED);
  EXPECT_EQ(api().memAddressFree(va, 2 * page_), CUDA_ERROR_INVALID_VALUE);  // still mapped
  EXPECT_EQ(api().memUnmap(va + page_, page_), CUDA_ERROR_INVALID_VALUE);    // nothing there
  EXPECT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(h), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().memAddressFree(va, 2 * page_), CUDA_SUCCESS);
}

TEST_F(Sim, StreamRunsWorkInOrderAsynchronously) {
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, 4096), CUDA_SUCCESS);
  auto* value = reinterpret_cast<int*>(p);
  *value = 0;
  Gate gate;
  ASSERT_EQ(launch_gated_write(stream, &gate, value, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8Async(p, 7, 1, stream), CUDA_SUCCESS);
  // Both calls returned, yet neither has run: the kernel waits on the gate.
  EXPECT_EQ(*value, 0);
  EXPECT_EQ(api().streamQuery(stream), CUDA_ERROR_NOT_READY);
  gate.release();
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  // In order: the kernel wrote 1, then the memset set the low byte to 7.
  EXPECT_EQ(*value, 7);
  EXPECT_EQ(api().streamQuery(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

TEST_F(Sim, EventCompletesWhenPriorWorkDoes) {
  CUstream a = nullptr;
  CUstream b = nullptr;
  ASSERT_EQ(api().streamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api().streamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent event = nullptr;
  ASSERT_EQ(api().eventCreate(&event, 0), CUDA_SUCCESS);
  EXPECT_EQ(api().eventQuery(event), CUDA_SUCCESS);  // never recorded
  int cell = 0;
  Gate gate;
  ASSERT_EQ(launch_gated_write(a, &gate, &cell, 5), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(event, a), CUDA_SUCCESS);
  EXPECT_EQ(api().eventQuery(event), CUDA_ERROR_NOT_READY);
  // b waits on the event: its write lands after a's.
  ASSERT_EQ(api().streamWaitEvent(b, event, 0), CUDA_SUCCESS);
  Gate open;
  open.release();
  ASSERT_EQ(launch_gated_write(b, &open, &cell, 9), CUDA_SUCCESS);
  gate.release();
  ASSERT_EQ(api().eventSynchronize(event), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(cell, 9);
  EXPECT_EQ(api().eventQuery(event), CUDA_SUCCESS);
  api().eventDestroy(event);
  api().streamDestroy(a);
  api().streamDestroy(b);
}

TEST_F(Sim, LegacyStreamWaitsForBlockingStreams) {
  CUstream blocking = nullptr;
  ASSERT_EQ(api().streamCreate(&blocking, 0), CUDA_SUCCESS);
  int cell = 0;
  Gate gate;
  ASSERT_EQ(launch_gated_write(blocking, &gate, &cell, 1), CUDA_SUCCESS);
  CUevent on_legacy = nullptr;
  api().eventCreate(&on_legacy, 0);
  ASSERT_EQ(api().eventRecord(on_legacy, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(api().eventQuery(on_legacy), CUDA_ERROR_NOT_READY);  // held back by the blocking stream
  gate.release();
  ASSERT_EQ(api().eventSynchronize(on_legacy), CUDA_SUCCESS);
  EXPECT_EQ(cell, 1);
  api().eventDestroy(on_legacy);
  api().streamDestroy(blocking);
}

TEST_F(Sim, FreeAsyncTakesEffectInStreamOrder) {
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  auto in_use = sim_control<std::size_t (*)()>("tidepool_sim_device_bytes_in_use");
  const std::size_t before = in_use();
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAllocAsync(&p, 1 << 20, stream), CUDA_SUCCESS);
  int cell = 0;
  Gate gate;
  ASSERT_EQ(launch_gated_write(stream, &gate, &cell, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().memFreeAsync(p, stream), CUDA_SUCCESS);
  EXPECT_EQ(in_use(), before + (1 << 20));  // not yet: the stream has not reached the free
  gate.release();
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(in_use(), before);
  api().streamDestroy(stream);
}

TEST_F(Sim, AllocationPastCapacityFailsWithOutOfMemory) {
  auto set_capacity = sim_control<void (*)(std::size_t)>("tidepool_sim_set_capacity");
  auto capacity = sim_control<std::size_t (*)()>("tidepool_sim_capacity");
  auto in_use = sim_control<std::size_t (*)()>("tidepool_sim_device_bytes_in_use");
  const std::size_t saved = capacity();
  set_capacity(in_use() + 8 * page_);
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  ASSERT_EQ(api().memGetInfo(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes, 8 * page_);
  CUdeviceptr p = 0;
  EXPECT_EQ(api().memAlloc(&p, 9 * page_), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(api().memAlloc(&p, 6 * page_), CUDA_SUCCESS);
  CUmemAllocationProp prop = device_prop();
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(api().memCreate(&h, 4 * page_, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  // Host-located physical memory does not count against the device.
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  ASSERT_EQ(api().memCreate(&h, 4 * page_, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
  set_capacity(saved);
}

TEST_F(Sim, InjectedFaultFailsTheNthCall) {
  auto inject = sim_control<void (*)(const char*, unsigned, CUresult)>("tidepool_sim_inject_fault");
  inject("cuMemAlloc_v2", 2, CUDA_ERROR_ECC_UNCORRECTABLE);
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  CUdeviceptr c = 0;
  EXPECT_EQ(api().memAlloc(&a, 4096), CUDA_SUCCESS);
  EXPECT_EQ(api().memAlloc(&b, 4096), CUDA_ERROR_ECC_UNCORRECTABLE);
  EXPECT_EQ(api().memAlloc(&c, 4096), CUDA_SUCCESS);  // one-shot
  api().memFree(a);
  api().memFree(c);
}

TEST_F(Sim, GetProcAddressReturnsVersionedVariants) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found{};
  ASSERT_EQ(api().getProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found), CUDA_SUCCESS);
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(fn, ::dlsym(sim_driver().handle(), "cuMemAlloc_v2"));
  ASSERT_EQ(api().getProcAddress("cuMemFreeAsync", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found),
            CUDA_SUCCESS);
  EXPECT_EQ(fn, ::dlsym(sim_driver().handle(), "cuMemFreeAsync_ptsz"));
  EXPECT_EQ(api().getProcAddress("cuMemAllocAsync", &fn, 11000, 0, &found), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(api().getProcAddress("cuNoSuchThing", &fn, 12000, 0, &found), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  // The v1 resolver exists under its own name.
  using V1 = CUresult (*)(const char*, void**, int, cuuint64_t);
  auto v1 = reinterpret_cast<V1>(::dlsym(sim_driver().handle(), "cuGetProcAddress"));
  ASSERT_NE(v1, nullptr);
  ASSERT_EQ(v1("cuMemFree", &fn, 12000, 0), CUDA_SUCCESS);
  EXPECT_EQ(fn, ::dlsym(sim_driver().handle(), "cuMemFree_v2"));
}

TEST_F(Sim, KernelLaunchReadsAndWritesDeviceMemory) {
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, sizeof(int)), CUDA_SUCCESS);
  std::size_t offset = 0;
  std::size_t size = 0;
  ASSERT_EQ(api().funcGetParamInfo(gated_write_kernel(), 2, &offset, &size), CUDA_SUCCESS);
  EXPECT_EQ(size, sizeof(int));
  EXPECT_EQ(offset, 16u);
  Gate open;
  open.release();
  ASSERT_EQ(launch_gated_write(nullptr, &open, reinterpret_cast<int*>(p), 42), CUDA_SUCCESS);
  int host = 0;
  ASSERT_EQ(api().memcpyDtoH(&host, p, sizeof(int)), CUDA_SUCCESS);
  EXPECT_EQ(host, 42);
  api().memFree(p);
}

TEST_F(Sim, PointerAttributesDescribeOnlyWhatTheSimAllocated) {
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, 1000), CUDA_SUCCESS);
  CUdeviceptr start = 0;
  std::size_t range = 0;
  ASSERT_EQ(api().pointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 10), CUDA_SUCCESS);
  ASSERT_EQ(api().pointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 10), CUDA_SUCCESS);
  EXPECT_EQ(start, p);
  EXPECT_EQ(range, 1000u);
  unsigned type = 0;
  ASSERT_EQ(api().pointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), CUDA_SUCCESS);
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  int on_host = 0;
  EXPECT_EQ(api().pointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(&on_host)),
            CUDA_ERROR_INVALID_VALUE);
  api().memFree(p);
}

TEST(Driver, OpeningAMissingLibraryIsAClearError) {
  auto opened = driver::Driver::open("/nonexistent/libcuda.so.1");
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().error(), util::Error::driver_missing);
}

TEST(Driver, ProbeReadsTheSimsCapabilities) {
  auto caps = driver::probe(sim_driver(), 0);
  ASSERT_TRUE(caps.ok());
  EXPECT_TRUE(caps->vmm);
  EXPECT_TRUE(caps->host_vmm);
  EXPECT_EQ(caps->granularity, 2u << 20);
  EXPECT_GT(caps->total_bytes, 0u);
}

TEST(Driver, EveryTableEntryResolvesOnTheSim) {
  const driver::Api& api = sim_driver().api();
#define TIDEPOOL_EXPECT_ENTRY(field, name, symbol) EXPECT_NE(reinterpret_cast<void*>(api.field), nullptr) << name;
  TIDEPOOL_DRIVER_ENTRY_POINTS(TIDEPOOL_EXPECT_ENTRY)
#undef TIDEPOOL_EXPECT_ENTRY
}

}  // namespace
}  // namespace tidepool
