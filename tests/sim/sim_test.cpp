// Specification of the simulated driver's semantics, exercised through the
// driver table exactly as tidepool calls it.
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sim/sim_control.h"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"

namespace tidepool {
namespace {

// Two simulated devices unless the environment says otherwise, so that the
// context tests have a second context. Static initialisation runs before
// main, before the sim is first opened and reads its environment.
[[maybe_unused]] const bool kTwoDevices = [] {
  ::setenv("TIDEPOOL_SIM_DEVICES", "2", 0);
  return true;
}();

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

// Whether a write (or a read) of one byte at `address` kills a child
// process with SIGSEGV, as touching VA with nothing (accessible) mapped does.
bool an_access_faults(CUdeviceptr address, bool write) {
  const pid_t child = fork();
  if (child == 0) {
    fault_with_default_handler();
    auto* byte = reinterpret_cast<volatile char*>(address);
    if (write) {
      *byte = 1;
    } else {
      (void)*byte;
    }
    _exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return false;
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}
bool a_write_faults(CUdeviceptr address) { return an_access_faults(address, /*write=*/true); }

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
    map_access(at, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  }
  // One page reserved and mapped read-write at `*va`.
  CUmemGenericAllocationHandle mapped_rw_page(CUdeviceptr* va) {
    EXPECT_EQ(api().memAddressReserve(va, page_, 0, 0, 0), CUDA_SUCCESS);
    const CUmemGenericAllocationHandle page = create_page();
    map_rw(*va, page);
    return page;
  }
  // Sets device 0's access to the page mapped at `at`.
  void map_access(CUdeviceptr at, CUmemAccess_flags flags) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = flags;
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
  EXPECT_TRUE(a_write_faults(va));  // must fault: nothing is mapped
  EXPECT_EQ(api().memAddressFree(va, 2 * page_), CUDA_SUCCESS);
}

// On a GPU a kernel touching a page between its unmap and its map faults,
// and the context keeps the error. The sim counts an unmap of a range a
// running kernel names and answers every synchronisation after it with
// CUDA_ERROR_ILLEGAL_ADDRESS (tidepool_sim_clear_faults forgets it, for the
// next test). Unmapping a page no running kernel names is no fault.
TEST_F(Sim, UnmappingAPageARunningKernelNamesIsAStickyFault) {
  const auto faults = sim_control<std::uint64_t (*)()>("tidepool_sim_remap_faults");
  const auto clear = sim_control<void (*)()>("tidepool_sim_clear_faults");
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, 2 * page_, 0, 0, 0), CUDA_SUCCESS);
  map_rw(va, create_page());
  map_rw(va + page_, create_page());
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  Gate gate;
  ASSERT_EQ(launch_gated_write(stream, &gate, reinterpret_cast<int*>(va), 5), CUDA_SUCCESS);
  // The other page: not named by the kernel.
  ASSERT_EQ(api().memUnmap(va + page_, page_), CUDA_SUCCESS);
  EXPECT_EQ(faults(), 0u);
  // Under the waiting kernel, once its worker runs it (the page mapped
  // again each time, so that the kernel's write lands somewhere).
  for (int i = 0; i < 2000 && faults() == 0; ++i) {
    ASSERT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
    map_rw(va, create_page());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(faults(), 1u);
  gate.release();
  EXPECT_EQ(api().streamSynchronize(stream), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(api().ctxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  clear();
  EXPECT_EQ(faults(), 0u);
  EXPECT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(va, 2 * page_), CUDA_SUCCESS);
}

// A "kernel" that fills `count` bytes at `target` with 0x5a once its gate
// opens, saying first that it has started (it is then running work).
struct FillArguments {
  Gate* gate;
  std::atomic<bool>* started;
};
void gated_fill(void** params, void* /*user*/) {
  const auto* args = *static_cast<FillArguments**>(params[0]);
  auto* target = *static_cast<unsigned char**>(params[1]);
  const std::size_t count = *static_cast<std::size_t*>(params[2]);
  args->started->store(true);
  args->gate->wait();
  std::memset(target, 0x5a, count);
}
// Registered with its extent declared: `count` bytes from `target`.
CUfunction gated_fill_kernel() {
  static const CUfunction f = [] {
    CUfunction fn = nullptr;
    const std::size_t sizes[] = {sizeof(FillArguments*), sizeof(void*), sizeof(std::size_t)};
    EXPECT_EQ(sim_control<decltype(&tidepool_sim_register_kernel)>("tidepool_sim_register_kernel")(&fn, &gated_fill,
                                                                                                   nullptr, 3, sizes),
              CUDA_SUCCESS);
    EXPECT_EQ(sim_control<decltype(&tidepool_sim_set_kernel_extent)>("tidepool_sim_set_kernel_extent")(fn, 1, 2, 1),
              CUDA_SUCCESS);
    return fn;
  }();
  return f;
}
// Launches gated_fill on `bytes` at `target`; `args` must outlive it.
CUresult launch_gated_fill(CUstream stream, FillArguments* args, CUdeviceptr target, std::size_t bytes) {
  auto* pointer = reinterpret_cast<unsigned char*>(target);
  void* params[] = {&args, &pointer, &bytes};
  return sim_driver().api().launchKernel(gated_fill_kernel(), 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
}
// A gated fill held at its gate, running: what start_gated_fill needs.
struct RunningFill {
  Gate gate;
  std::atomic<bool> started{false};
  FillArguments args{&gate, &started};
};
// Launches `fill` on `bytes` at `target` and returns once it is running.
void start_gated_fill(RunningFill* fill, CUstream stream, CUdeviceptr target, std::size_t bytes) {
  ASSERT_EQ(launch_gated_fill(stream, &fill->args, target, bytes), CUDA_SUCCESS);
  while (!fill->started.load()) std::this_thread::yield();
}
// A kernel that only counts its runs: a pointer among its arguments is
// never followed.
void count_runs(void** /*params*/, void* user) { static_cast<std::atomic<int>*>(user)->fetch_add(1); }

// On a GPU, work queued before an unmap that runs after it reaches a page
// with nothing mapped and faults, sticky for the context; the process lives
// on. The sim skips each such set, copy, stream write and kernel whose
// extent reaches the page, writes none of their bytes, and answers
// synchronisations with CUDA_ERROR_ILLEGAL_ADDRESS. A kernel that only
// names the page runs, as a mapping without write access takes reads but
// refuses writes.
TEST_F(Sim, WorkQueuedBeforeAnUnmapThatRunsAfterItFaultsAndWritesNothing) {
  const auto unmapped_faults = sim_control<std::uint64_t (*)()>("tidepool_sim_unmapped_faults");
  const auto remap_faults = sim_control<std::uint64_t (*)()>("tidepool_sim_remap_faults");
  const auto clear = sim_control<void (*)()>("tidepool_sim_clear_faults");
  const auto write32 = sim_control<decltype(&::cuStreamWriteValue32_v2)>("cuStreamWriteValue32_v2");
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, 2 * page_, 0, 0, 0), CUDA_SUCCESS);
  const CUmemGenericAllocationHandle gone = create_page();
  map_rw(va, gone);
  const CUdeviceptr read_only = va + page_;
  const CUmemGenericAllocationHandle kept = create_page();
  ASSERT_EQ(api().memMap(read_only, page_, 0, kept, 0), CUDA_SUCCESS);
  CUmemAccessDesc read{};
  read.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  read.location.id = 0;
  read.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  ASSERT_EQ(api().memSetAccess(read_only, page_, &read, 1), CUDA_SUCCESS);
  CUdeviceptr out = 0;
  ASSERT_EQ(api().memAlloc(&out, 2 * 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(out, 0x11, 2 * 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);

  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  Gate gate;
  int cell = 0;
  ASSERT_EQ(launch_gated_write(stream, &gate, &cell, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8Async(va, 0x22, 4096, stream), CUDA_SUCCESS);
  ASSERT_EQ(api().memcpyDtoDAsync(out, va, 4096, stream), CUDA_SUCCESS);
  ASSERT_EQ(write32(stream, va + 64, 7, CU_STREAM_WRITE_VALUE_DEFAULT), CUDA_SUCCESS);
  Gate open;
  open.release();
  std::atomic<bool> started{false};
  FillArguments fill{&open, &started};
  ASSERT_EQ(launch_gated_fill(stream, &fill, va, 4096), CUDA_SUCCESS);
  std::atomic<int> runs{0};
  CUfunction counter = nullptr;
  const std::size_t pointer_size[] = {sizeof(CUdeviceptr)};
  ASSERT_EQ(sim_control<decltype(&tidepool_sim_register_kernel)>("tidepool_sim_register_kernel")(
                &counter, &count_runs, &runs, 1, pointer_size),
            CUDA_SUCCESS);
  CUdeviceptr named = va;
  void* named_params[] = {&named};
  ASSERT_EQ(api().launchKernel(counter, 1, 1, 1, 1, 1, 1, 0, stream, named_params, nullptr), CUDA_SUCCESS);
  // The read-only page: read by a copy, refused to a set.
  ASSERT_EQ(api().memcpyDtoDAsync(out + 4096, read_only, 4096, stream), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8Async(read_only, 0x33, 4096, stream), CUDA_SUCCESS);

  ASSERT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
  gate.release();
  EXPECT_EQ(api().streamSynchronize(stream), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(api().ctxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(unmapped_faults(), 5u);  // the set, the copy, the stream write, the fill; the read-only set
  EXPECT_EQ(remap_faults(), 0u);     // nothing ran on the page when it went
  EXPECT_FALSE(started.load());
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(cell, 1);
  std::vector<unsigned char> copied(2 * 4096);
  std::memcpy(copied.data(), reinterpret_cast<const void*>(out), copied.size());
  EXPECT_TRUE(std::all_of(copied.begin(), copied.begin() + 4096, [](unsigned char b) { return b == 0x11; }));
  EXPECT_EQ(std::memcmp(copied.data() + 4096, reinterpret_cast<const void*>(read_only), 4096), 0);
  EXPECT_EQ(*reinterpret_cast<const unsigned char*>(read_only), copied[4096]);

  clear();
  EXPECT_EQ(unmapped_faults(), 0u);
  EXPECT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().memUnmap(read_only, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(gone), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(kept), CUDA_SUCCESS);
  EXPECT_EQ(api().memFree(out), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(va, 2 * page_), CUDA_SUCCESS);
}

// A page unmapped under a running kernel that writes it faults on a GPU;
// in the sim the kernel's bytes land in scratch memory instead of killing
// the process, never in the page that was mapped there, and once it is
// done the VA is inaccessible reserved VA again.
TEST_F(Sim, AnUnmapUnderRunningWorkLeavesItsWritesInScratchThenTheVaInaccessible) {
  const auto remap_faults = sim_control<std::uint64_t (*)()>("tidepool_sim_remap_faults");
  const auto clear = sim_control<void (*)()>("tidepool_sim_clear_faults");
  CUdeviceptr va = 0;
  const CUmemGenericAllocationHandle page = mapped_rw_page(&va);
  std::memset(reinterpret_cast<void*>(va), 0, page_);
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  RunningFill fill;
  ASSERT_NO_FATAL_FAILURE(start_gated_fill(&fill, stream, va, page_));
  ASSERT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
  EXPECT_EQ(remap_faults(), 1u);
  fill.gate.release();
  EXPECT_EQ(api().streamSynchronize(stream), CUDA_ERROR_ILLEGAL_ADDRESS);

  EXPECT_TRUE(a_write_faults(va));  // must fault: scratch is gone, nothing is mapped

  // The page itself never saw the kernel's bytes.
  map_rw(va, page);
  const auto* bytes = reinterpret_cast<const unsigned char*>(va);
  EXPECT_TRUE(std::none_of(bytes, bytes + page_, [](unsigned char b) { return b == 0x5a; }));
  clear();
  EXPECT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(page), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(va, page_), CUDA_SUCCESS);
}

// A reservation freed while work still writes the scratch in it stays in
// the process until that work is done, then leaves it.
TEST_F(Sim, AReservationFreedUnderRunningWorkLeavesTheProcessOnceTheWorkIsDone) {
  const auto clear = sim_control<void (*)()>("tidepool_sim_clear_faults");
  CUdeviceptr va = 0;
  const CUmemGenericAllocationHandle page = mapped_rw_page(&va);
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  RunningFill fill;
  ASSERT_NO_FATAL_FAILURE(start_gated_fill(&fill, stream, va, page_));
  ASSERT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
  ASSERT_EQ(api().memAddressFree(va, page_), CUDA_SUCCESS);
  EXPECT_EQ(::msync(reinterpret_cast<void*>(va), page_, MS_ASYNC), 0) << "the scratch left under running work";
  fill.gate.release();
  EXPECT_EQ(api().streamSynchronize(stream), CUDA_ERROR_ILLEGAL_ADDRESS);
  errno = 0;
  EXPECT_EQ(::msync(reinterpret_cast<void*>(va), page_, MS_ASYNC), -1) << "the freed range is still in the process";
  EXPECT_EQ(errno, ENOMEM);
  clear();
  EXPECT_EQ(api().memRelease(page), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

// Access taken away under running work that needs it faults that work on
// a GPU. In the sim the work goes on with the protection it started with
// (not killing the process), and once it is done the mapping holds to its
// new access list. A kernel's extent counts as a read: taking only write
// access from it is no fault the sim can see.
TEST_F(Sim, AccessTakenFromRunningWorkFaultsItThenTheMappingHoldsToTheNewAccess) {
  const auto remap_faults = sim_control<std::uint64_t (*)()>("tidepool_sim_remap_faults");
  const auto clear = sim_control<void (*)()>("tidepool_sim_clear_faults");
  CUdeviceptr va = 0;
  const CUmemGenericAllocationHandle page = mapped_rw_page(&va);
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const auto* bytes = reinterpret_cast<const unsigned char*>(va);
  {
    RunningFill fill;
    ASSERT_NO_FATAL_FAILURE(start_gated_fill(&fill, stream, va, page_));
    map_access(va, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    EXPECT_EQ(remap_faults(), 1u) << "the fill's page taken from under it";
    map_access(va, CU_MEM_ACCESS_FLAGS_PROT_READ);  // still below what the fill started with
    fill.gate.release();
    EXPECT_EQ(api().streamSynchronize(stream), CUDA_ERROR_ILLEGAL_ADDRESS);
  }
  EXPECT_FALSE(an_access_faults(va, /*write=*/false)) << "the last access list: read-only";
  EXPECT_TRUE(a_write_faults(va));
  EXPECT_EQ(remap_faults(), 1u);
  clear();

  // Write access taken from a kernel whose extent counts as a read.
  map_access(va, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  std::memset(reinterpret_cast<void*>(va), 0, page_);
  {
    RunningFill fill;
    ASSERT_NO_FATAL_FAILURE(start_gated_fill(&fill, stream, va, page_));
    map_access(va, CU_MEM_ACCESS_FLAGS_PROT_READ);
    fill.gate.release();
    EXPECT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  }
  EXPECT_EQ(remap_faults(), 0u);
  EXPECT_EQ(bytes[page_ - 1], 0x5a) << "the fill ran with the protection it started with";
  EXPECT_TRUE(a_write_faults(va)) << "read-only once the work is done";
  EXPECT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(page), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(va, page_), CUDA_SUCCESS);
}

// A page moved under running work: unmapped (the work faults), then another
// page mapped at the same VA before the work is done, as a page mover does.
// The new mapping has no access until cuMemSetAccess, yet the work goes on
// writing there: the mapping stays writable for that work until it is
// done, then holds to its access list. The map is no second fault.
TEST_F(Sim, APageMappedUnderWorkThatFaultedOnItsUnmapKeepsItsAccessUntilTheWorkIsDone) {
  const auto remap_faults = sim_control<std::uint64_t (*)()>("tidepool_sim_remap_faults");
  const auto clear = sim_control<void (*)()>("tidepool_sim_clear_faults");
  CUdeviceptr va = 0;
  const CUmemGenericAllocationHandle first = mapped_rw_page(&va);
  const CUmemGenericAllocationHandle second = create_page();
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  {
    RunningFill fill;
    ASSERT_NO_FATAL_FAILURE(start_gated_fill(&fill, stream, va, page_));
    ASSERT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
    EXPECT_EQ(remap_faults(), 1u);
    ASSERT_EQ(api().memMap(va, page_, 0, second, 0), CUDA_SUCCESS);  // no access yet
    fill.gate.release();                                             // the fill writes the whole page
    EXPECT_EQ(api().streamSynchronize(stream), CUDA_ERROR_ILLEGAL_ADDRESS);
  }
  EXPECT_EQ(remap_faults(), 1u) << "the map is no second fault";
  EXPECT_TRUE(an_access_faults(va, /*write=*/false)) << "no access list yet: inaccessible once the work is done";
  map_access(va, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  EXPECT_FALSE(an_access_faults(va, /*write=*/true));
  clear();
  EXPECT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(first), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(second), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(va, page_), CUDA_SUCCESS);
}

// A stream wait on a word unmapped under it faults on a GPU: in the sim the
// wait ends (the stream goes on, answering with the fault) instead of
// spinning on scratch or killing the process.
TEST_F(Sim, AStreamWaitOnAWordUnmappedUnderItEndsWithTheFault) {
  const auto remap_faults = sim_control<std::uint64_t (*)()>("tidepool_sim_remap_faults");
  const auto unmapped_faults = sim_control<std::uint64_t (*)()>("tidepool_sim_unmapped_faults");
  const auto clear = sim_control<void (*)()>("tidepool_sim_clear_faults");
  const auto wait32 = sim_control<decltype(&::cuStreamWaitValue32_v2)>("cuStreamWaitValue32_v2");
  CUdeviceptr va = 0;
  const CUmemGenericAllocationHandle page = mapped_rw_page(&va);
  std::memset(reinterpret_cast<void*>(va), 0, page_);
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(wait32(stream, va, 1, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);  // never written
  std::this_thread::sleep_for(std::chrono::milliseconds(20));               // the wait is running, most likely
  ASSERT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().streamSynchronize(stream), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(remap_faults() + unmapped_faults(), 1u);
  clear();
  EXPECT_EQ(api().memRelease(page), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(va, page_), CUDA_SUCCESS);
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

// TIDEPOOL_SIM_VMM_US (here its control call): each VMM call spends its
// cost per page on the calling thread, as a real driver's ioctls do, so that
// a figure measured on the sim pays for the remaps a GPU would.
TEST_F(Sim, VmmCallsTakeTheHostTimeTheyAreGivenPerPage) {
  auto set_vmm_us = testing::sim_control<void (*)(const char*)>("tidepool_sim_set_vmm_us");
  ASSERT_NE(set_vmm_us, nullptr);
  const auto ms_of = [](auto call) {
    const auto start = std::chrono::steady_clock::now();
    call();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  set_vmm_us("create:3000,map:2000,unmap:1500,release:1000,bogus:99");
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, 2 * page_, 0, 0, 0), CUDA_SUCCESS);
  CUmemAllocationProp prop = device_prop();
  CUmemGenericAllocationHandle h = 0;
  EXPECT_GE(ms_of([&] { ASSERT_EQ(api().memCreate(&h, 2 * page_, &prop, 0), CUDA_SUCCESS); }), 6.0);
  EXPECT_GE(ms_of([&] { ASSERT_EQ(api().memMap(va, 2 * page_, 0, h, 0), CUDA_SUCCESS); }), 4.0);
  EXPECT_GE(ms_of([&] { ASSERT_EQ(api().memUnmap(va, 2 * page_), CUDA_SUCCESS); }), 3.0);
  EXPECT_GE(ms_of([&] { ASSERT_EQ(api().memRelease(h), CUDA_SUCCESS); }), 2.0);
  // A host-located page pins its memory: its create has a cost of its own.
  set_vmm_us("create:1,host_create:25000");
  CUmemAllocationProp host = device_prop();
  host.location.type = CU_MEM_LOCATION_TYPE_HOST;
  host.location.id = 0;
  EXPECT_GE(ms_of([&] { ASSERT_EQ(api().memCreate(&h, 2 * page_, &host, 0), CUDA_SUCCESS); }), 50.0);
  EXPECT_EQ(api().memRelease(h), CUDA_SUCCESS);
  EXPECT_LT(ms_of([&] { ASSERT_EQ(api().memCreate(&h, 2 * page_, &prop, 0), CUDA_SUCCESS); }), 50.0)
      << "a device page paid for pinning";
  EXPECT_EQ(api().memRelease(h), CUDA_SUCCESS);
  set_vmm_us(nullptr);
  EXPECT_EQ(api().memAddressFree(va, 2 * page_), CUDA_SUCCESS);
}

// A driver's calls cost host time of their own (an event query 1.2 us on an
// H200): the named entry points take what they are given, per call, and the
// others nothing more.
TEST_F(Sim, NamedCallsTakeTheHostTimeTheyAreGivenPerCall) {
  auto set_call_ns = testing::sim_control<void (*)(const char*)>("tidepool_sim_set_call_ns");
  ASSERT_NE(set_call_ns, nullptr);
  CUevent event = nullptr;
  ASSERT_EQ(api().eventCreate(&event, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(event, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().eventSynchronize(event), CUDA_SUCCESS);
  const auto ms_for_100 = [](auto call) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) call();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  set_call_ns("cuEventQuery:200000,bogus:5,cuCtxGetDevice:-3");
  EXPECT_GE(ms_for_100([&] { EXPECT_EQ(api().eventQuery(event), CUDA_SUCCESS); }), 20.0);
  CUdevice device = -1;
  EXPECT_LT(ms_for_100([&] { EXPECT_EQ(api().ctxGetDevice(&device), CUDA_SUCCESS); }), 20.0)
      << "a call not named (or given a negative cost) paid";
  set_call_ns(nullptr);
  EXPECT_LT(ms_for_100([&] { EXPECT_EQ(api().eventQuery(event), CUDA_SUCCESS); }), 20.0)
      << "the cost outlived its reset";
  EXPECT_EQ(api().eventDestroy(event), CUDA_SUCCESS);
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

// A GPU's work queue holds about a thousand launches a stream; past that a
// launch blocks until the device takes one. With a depth set, the sim's
// device lags the host by no more than that, not by the whole program.
TEST_F(Sim, AFullStreamQueueMakesTheHostWaitForRoom) {
  auto set_depth = testing::sim_control<void (*)(std::size_t)>("tidepool_sim_set_queue_depth");
  auto depth_now = testing::sim_control<std::size_t (*)()>("tidepool_sim_queue_depth");
  ASSERT_NE(set_depth, nullptr);
  ASSERT_NE(depth_now, nullptr);
  if (const char* set = std::getenv("TIDEPOOL_SIM_QUEUE_DEPTH"); set == nullptr) {
    EXPECT_EQ(depth_now(), 1024u) << "as deep as a GPU's queue unless asked";
  }
  struct RestoreDepth {
    void (*set)(std::size_t);
    std::size_t depth;
    ~RestoreDepth() { set(depth); }
  } restore{set_depth, depth_now()};
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, 4096), CUDA_SUCCESS);
  auto* value = reinterpret_cast<int*>(p);
  *value = 0;
  constexpr std::size_t kDepth = 4;
  set_depth(kDepth);
  // The gate opens 50 ms after the queue is full, or after 3 s whatever
  // happens, so that a wait where none belongs fails the test, not hangs it.
  Gate gate;
  std::atomic<bool> full{false};
  std::atomic<bool> opened{false};
  std::atomic<bool> full_when_opened{false};
  std::jthread opener([&] {
    for (int i = 0; i < 3000 && !full; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    full_when_opened = full.load();
    opened = true;
    gate.release();
  });
  // The gated kernel runs and holds the stream; kDepth more items fill the
  // queue (the last may wait for the worker to take the kernel, never for
  // the gate).
  ASSERT_EQ(launch_gated_write(stream, &gate, value, 1), CUDA_SUCCESS);
  for (std::size_t i = 0; i < kDepth; ++i) ASSERT_EQ(api().memsetD8Async(p + 4 + i, 1, 1, stream), CUDA_SUCCESS);
  full = true;
  // The queue is full: one more submission returns only once the gate opens.
  EXPECT_EQ(api().memsetD8Async(p + 8, 1, 1, stream), CUDA_SUCCESS);
  EXPECT_TRUE(opened.load()) << "a submission went past a full queue";
  opener.join();
  EXPECT_TRUE(full_when_opened.load()) << "the host waited before the queue was full";
  // Unbounded again: more items than any default bound queue behind a shut
  // gate without a wait.
  set_depth(0);
  Gate second;
  std::atomic<bool> released{false};
  std::atomic<bool> opened_late{false};
  std::jthread late([&] {
    for (int i = 0; i < 3000 && !released; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    opened_late = true;
    second.release();
  });
  ASSERT_EQ(launch_gated_write(stream, &second, value, 2), CUDA_SUCCESS);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(api().memsetD8Async(p + 16, 1, 1, stream), CUDA_SUCCESS);
  EXPECT_FALSE(opened_late.load()) << "the host waited for room in an unbounded queue";
  released = true;
  second.release();
  late.join();
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(*value, 2);
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

// The runtime launches library kernels by their CUkernel handles cast to
// CUfunction: the launch runs, cuKernelGetParamInfo describes the handle and
// cuFuncGetParamInfo refuses it; a module function is the other way round.
TEST_F(Sim, ALibraryKernelLaunchesByItsHandleAndOnlyTheKernelQueryDescribesIt) {
  auto reg =
      testing::sim_control<decltype(&tidepool_sim_register_library_kernel)>("tidepool_sim_register_library_kernel");
  ASSERT_NE(reg, nullptr);
  const std::size_t sizes[] = {sizeof(int*), sizeof(int)};
  CUkernel kernel = nullptr;
  ASSERT_EQ(reg(
                &kernel, [](void** params, void*) { **static_cast<int**>(params[0]) = *static_cast<int*>(params[1]); },
                nullptr, 2, sizes),
            CUDA_SUCCESS);
  const auto as_function = reinterpret_cast<CUfunction>(kernel);
  std::size_t offset = 0;
  std::size_t size = 0;
  EXPECT_EQ(api().funcGetParamInfo(as_function, 0, &offset, &size), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(api().kernelGetParamInfo(kernel, 1, &offset, &size), CUDA_SUCCESS);
  EXPECT_EQ(offset, 8u);
  EXPECT_EQ(size, sizeof(int));
  EXPECT_EQ(api().kernelGetParamInfo(kernel, 2, &offset, &size), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().kernelGetParamInfo(reinterpret_cast<CUkernel>(gated_write_kernel()), 0, &offset, &size),
            CUDA_ERROR_INVALID_HANDLE);

  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, sizeof(int)), CUDA_SUCCESS);
  auto* target = reinterpret_cast<int*>(p);
  int value = 7;
  void* params[] = {&target, &value};
  ASSERT_EQ(api().launchKernel(as_function, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  int host = 0;
  ASSERT_EQ(api().memcpyDtoH(&host, p, sizeof(int)), CUDA_SUCCESS);
  EXPECT_EQ(host, 7);
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
  // cuPointerGetAttributes never fails for want of a value: device memory's
  // host pointer, and every attribute of memory no one allocated, are null.
  void* host = &on_host;
  CUdeviceptr pointer = 0;
  int ordinal = 0;
  CUpointer_attribute asked[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                 CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void* answers[] = {&type, &host, &pointer, &ordinal};
  ASSERT_EQ(api().pointerGetAttributes(4, asked, answers, p + 10), CUDA_SUCCESS);
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  EXPECT_EQ(host, nullptr);
  EXPECT_EQ(pointer, p + 10);
  EXPECT_EQ(ordinal, 0);
  ASSERT_EQ(api().pointerGetAttributes(4, asked, answers, reinterpret_cast<CUdeviceptr>(&on_host)), CUDA_SUCCESS);
  EXPECT_EQ(type, 0U);
  EXPECT_EQ(pointer, 0U);
  EXPECT_EQ(ordinal, -2);
  api().memFree(p);
}

// --- helpers for the entry points outside the driver table ----------------------------------------

// Entry points tidepool's table lacks, resolved from the sim by ABI name.
template <typename Fn>
Fn entry(const char* name) {
  return sim_control<Fn>(name);
}

// Older ABI variants cuda.h names only through macros for the newest one.
using BeginCaptureV1 = CUresult (*)(CUstream);
using CaptureInfoV1 = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*);
using CaptureInfoV2 = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**,
                                   std::size_t*);
using ElapsedTimeV1 = CUresult (*)(float*, CUevent, CUevent);
using GetProcAddressV1 = CUresult (*)(const char*, void**, int, cuuint64_t);
using AllocAsync = CUresult (*)(CUdeviceptr*, std::size_t, CUstream);
using FreeAsync = CUresult (*)(CUdeviceptr, CUstream);
using IpcOpenMemHandleV1 = CUresult (*)(CUdeviceptr*, CUipcMemHandle, unsigned int);
// Per-thread-default-stream forms, typed like the plain ones.
using LaunchKernelPtsz = decltype(&::cuLaunchKernel);
using GraphLaunchPtsz = decltype(&::cuGraphLaunch);
using LaunchKernelExPtsz = decltype(&::cuLaunchKernelEx);
using WaitValue32Ptsz = decltype(&::cuStreamWaitValue32_v2);
using WaitValue64Ptsz = decltype(&::cuStreamWaitValue64_v2);
using WriteValue32Ptsz = decltype(&::cuStreamWriteValue32_v2);
using WriteValue64Ptsz = decltype(&::cuStreamWriteValue64_v2);
using BatchMemOpPtsz = decltype(&::cuStreamBatchMemOp_v2);
using BeginCapturePtsz = decltype(&::cuStreamBeginCapture_v2);
using BeginCaptureToGraphPtsz = decltype(&::cuStreamBeginCaptureToGraph);
using EndCapturePtsz = decltype(&::cuStreamEndCapture);
using CtxCreateV2 = CUresult (*)(CUcontext*, unsigned int, CUdevice);
using CtxCreateV3 = CUresult (*)(CUcontext*, CUexecAffinityParam*, int, unsigned int, CUdevice);
using CopyBatchPtsz = decltype(&::cuMemcpyBatchAsync_v2);
using Copy3DBatchPtsz = decltype(&::cuMemcpy3DBatchAsync_v2);
using Copy3DBatchV1 = CUresult (*)(std::size_t, CUDA_MEMCPY3D_BATCH_OP*, std::size_t*, unsigned long long, CUstream);
using CopyBatchV1 = CUresult (*)(CUdeviceptr*, CUdeviceptr*, std::size_t*, std::size_t, CUmemcpyAttributes*,
                                 std::size_t*, std::size_t, std::size_t*, CUstream);

struct CaptureApi {
  decltype(&::cuStreamBeginCapture_v2) begin = entry<decltype(&::cuStreamBeginCapture_v2)>("cuStreamBeginCapture_v2");
  decltype(&::cuStreamEndCapture) end = entry<decltype(&::cuStreamEndCapture)>("cuStreamEndCapture");
  decltype(&::cuStreamGetCaptureInfo_v3) info =
      entry<decltype(&::cuStreamGetCaptureInfo_v3)>("cuStreamGetCaptureInfo_v3");
  decltype(&::cuThreadExchangeStreamCaptureMode) exchange_mode =
      entry<decltype(&::cuThreadExchangeStreamCaptureMode)>("cuThreadExchangeStreamCaptureMode");
  decltype(&::cuGraphDestroy) destroy_graph = entry<decltype(&::cuGraphDestroy)>("cuGraphDestroy");
  decltype(&::cuLaunchHostFunc) launch_host_func = entry<decltype(&::cuLaunchHostFunc)>("cuLaunchHostFunc");
};

const CaptureApi& capture_api() {
  static const CaptureApi api;
  return api;
}

// True once `condition` holds, polling for up to five seconds.
bool eventually(const std::function<bool()>& condition) {
  for (int i = 0; i < 500; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

CUstreamCaptureStatus capture_status(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_EQ(sim_driver().api().streamIsCapturing(stream, &status), CUDA_SUCCESS);
  return status;
}

cuuint64_t capture_id(CUstream stream) {
  CUstreamCaptureStatus status{};
  cuuint64_t id = 0;
  EXPECT_EQ(capture_api().info(stream, &status, &id, nullptr, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  return id;
}

// Ends a capture expected to succeed and destroys its graph.
void end_and_destroy(CUstream stream) {
  CUgraph graph = nullptr;
  ASSERT_EQ(capture_api().end(stream, &graph), CUDA_SUCCESS);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(capture_api().destroy_graph(graph), CUDA_SUCCESS);
}

// Ends a capture expected to have been invalidated.
void end_invalidated(CUstream stream) {
  CUgraph graph = reinterpret_cast<CUgraph>(std::uintptr_t{1});
  EXPECT_EQ(capture_api().end(stream, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(graph, nullptr);
}

void count_call(void* counter) { ++*static_cast<std::atomic<int>*>(counter); }

// --- the legacy stream and destroyed streams ------------------------------------------------------------

TEST_F(Sim, LegacyStreamWaitsForDestroyedBlockingStreamsStillRunning) {
  CUstream blocking = nullptr;
  ASSERT_EQ(api().streamCreate(&blocking, 0), CUDA_SUCCESS);
  int cell = 0;
  Gate gate;
  ASSERT_EQ(launch_gated_write(blocking, &gate, &cell, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().streamDestroy(blocking), CUDA_SUCCESS);  // returns at once; the work still runs
  CUevent on_legacy = nullptr;
  ASSERT_EQ(api().eventCreate(&on_legacy, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(on_legacy, nullptr), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // room to run ahead, were it not held back
  EXPECT_EQ(api().eventQuery(on_legacy), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(api().streamQuery(nullptr), CUDA_ERROR_NOT_READY);
  gate.release();
  ASSERT_EQ(api().eventSynchronize(on_legacy), CUDA_SUCCESS);
  EXPECT_EQ(cell, 1);
  EXPECT_EQ(api().eventDestroy(on_legacy), CUDA_SUCCESS);
}

TEST_F(Sim, LegacyStreamNeverWaitsForNonBlockingStreamsLiveOrDestroyed) {
  CUstream live = nullptr;
  CUstream gone = nullptr;
  ASSERT_EQ(api().streamCreate(&live, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api().streamCreate(&gone, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  int a = 0;
  int b = 0;
  Gate gate;
  ASSERT_EQ(launch_gated_write(live, &gate, &a, 1), CUDA_SUCCESS);
  ASSERT_EQ(launch_gated_write(gone, &gate, &b, 2), CUDA_SUCCESS);
  ASSERT_EQ(api().streamDestroy(gone), CUDA_SUCCESS);
  CUevent on_legacy = nullptr;
  ASSERT_EQ(api().eventCreate(&on_legacy, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(on_legacy, nullptr), CUDA_SUCCESS);
  // Both gated kernels are still blocked, yet the legacy stream's work runs.
  EXPECT_TRUE(eventually([&] { return api().eventQuery(on_legacy) == CUDA_SUCCESS; }));
  EXPECT_TRUE(eventually([&] { return api().streamQuery(nullptr) == CUDA_SUCCESS; }));
  EXPECT_EQ(a + b, 0);
  gate.release();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);  // the context's streams, destroyed ones too
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
  EXPECT_EQ(api().eventDestroy(on_legacy), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(live), CUDA_SUCCESS);
}

// --- contexts ------------------------------------------------------------------------------------------

TEST_F(Sim, StreamGetFlagsReportsTheCreationFlags) {
  auto get_flags = entry<decltype(&::cuStreamGetFlags)>("cuStreamGetFlags");
  CUstream blocking = nullptr;
  CUstream non_blocking = nullptr;
  ASSERT_EQ(api().streamCreate(&blocking, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().streamCreate(&non_blocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  unsigned flags = 99;
  ASSERT_EQ(get_flags(non_blocking, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
  ASSERT_EQ(get_flags(blocking, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, 0u);
  for (CUstream special : {static_cast<CUstream>(nullptr), CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    flags = 99;
    ASSERT_EQ(get_flags(special, &flags), CUDA_SUCCESS);
    EXPECT_EQ(flags, 0u);
  }
  EXPECT_EQ(get_flags(blocking, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api().streamDestroy(blocking), CUDA_SUCCESS);
  EXPECT_EQ(get_flags(blocking, &flags), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().streamDestroy(non_blocking), CUDA_SUCCESS);
}

TEST_F(Sim, RecordsWaitMakesARecordCompleteBeforeItReturns) {
  auto set_records_wait = sim_control<void (*)(int)>("tidepool_sim_set_records_wait");
  CUstream a = nullptr;
  ASSERT_EQ(api().streamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent event = nullptr;
  ASSERT_EQ(api().eventCreate(&event, 0), CUDA_SUCCESS);
  // Queued work still runs first: the record returns after the gate opens.
  int cell = 0;
  Gate gate;
  ASSERT_EQ(launch_gated_write(a, &gate, &cell, 5), CUDA_SUCCESS);
  set_records_wait(1);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.release();
  });
  ASSERT_EQ(api().eventRecord(event, a), CUDA_SUCCESS);
  EXPECT_EQ(api().eventQuery(event), CUDA_SUCCESS);
  EXPECT_EQ(cell, 5);
  opener.join();
  for (int i = 0; i < 100; ++i) {  // never a race: each record has completed
    ASSERT_EQ(api().eventRecord(event, a), CUDA_SUCCESS);
    ASSERT_EQ(api().eventQuery(event), CUDA_SUCCESS);
  }
  set_records_wait(0);
  api().eventDestroy(event);
  api().streamDestroy(a);
}

TEST_F(Sim, StreamsAndEventsNeedACurrentContext) {
  auto get_ctx = entry<decltype(&::cuStreamGetCtx)>("cuStreamGetCtx");
  auto get_flags = entry<decltype(&::cuStreamGetFlags)>("cuStreamGetFlags");
  ASSERT_EQ(api().ctxSetCurrent(nullptr), CUDA_SUCCESS);
  CUstream stream = nullptr;
  CUevent event = nullptr;
  CUcontext ctx = nullptr;
  unsigned flags = 0;
  EXPECT_EQ(api().streamCreate(&stream, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().eventCreate(&event, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(get_ctx(nullptr, &ctx), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(get_ctx(CU_STREAM_PER_THREAD, &ctx), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(get_flags(CU_STREAM_LEGACY, &flags), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(api().ctxSetCurrent(context_), CUDA_SUCCESS);
  ASSERT_EQ(api().streamCreate(&stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(get_ctx(stream, &ctx), CUDA_SUCCESS);
  EXPECT_EQ(ctx, context_);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

class SimTwoContexts : public Sim {
 protected:
  void SetUp() override {
    Sim::SetUp();
    int count = 0;
    ASSERT_EQ(api().deviceGetCount(&count), CUDA_SUCCESS);
    if (count < 2) GTEST_SKIP() << "needs TIDEPOOL_SIM_DEVICES >= 2";
    ASSERT_EQ(api().devicePrimaryCtxRetain(&other_, 1), CUDA_SUCCESS);
  }
  void TearDown() override {
    api().ctxSetCurrent(context_);
    if (other_ != nullptr) api().devicePrimaryCtxRelease(1);
    Sim::TearDown();
  }
  CUcontext other_ = nullptr;
};

TEST_F(SimTwoContexts, StreamsBelongToTheContextCurrentAtCreation) {
  auto get_ctx = entry<decltype(&::cuStreamGetCtx)>("cuStreamGetCtx");
  auto get_ctx_v2 = entry<decltype(&::cuStreamGetCtx_v2)>("cuStreamGetCtx_v2");
  ASSERT_NE(other_, context_);
  CUstream first = nullptr;
  CUstream second = nullptr;
  ASSERT_EQ(api().streamCreate(&first, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().ctxSetCurrent(other_), CUDA_SUCCESS);
  ASSERT_EQ(api().streamCreate(&second, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  ASSERT_EQ(get_ctx(first, &ctx), CUDA_SUCCESS);
  EXPECT_EQ(ctx, context_);  // where it was created, not what is current now
  ASSERT_EQ(get_ctx(second, &ctx), CUDA_SUCCESS);
  EXPECT_EQ(ctx, other_);
  // The special handles name the calling thread's current context.
  for (CUstream special : {static_cast<CUstream>(nullptr), CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    ctx = nullptr;
    ASSERT_EQ(get_ctx(special, &ctx), CUDA_SUCCESS);
    EXPECT_EQ(ctx, other_);
  }
  CUgreenCtx green = reinterpret_cast<CUgreenCtx>(std::uintptr_t{1});
  ASSERT_EQ(get_ctx_v2(first, &ctx, &green), CUDA_SUCCESS);
  EXPECT_EQ(ctx, context_);
  EXPECT_EQ(green, nullptr);
  EXPECT_EQ(api().streamDestroy(first), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(second), CUDA_SUCCESS);
}

TEST_F(SimTwoContexts, EventsRecordOnlyOnStreamsOfTheirContextButAreWaitedOnAcrossContexts) {
  CUstream here = nullptr;
  ASSERT_EQ(api().streamCreate(&here, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api().ctxSetCurrent(other_), CUDA_SUCCESS);
  CUstream there = nullptr;
  CUevent event = nullptr;
  ASSERT_EQ(api().streamCreate(&there, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api().eventCreate(&event, 0), CUDA_SUCCESS);  // belongs to the other context
  EXPECT_EQ(api().eventRecord(event, here), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().eventRecord(event, nullptr), CUDA_SUCCESS);  // the other context's legacy stream
  int cell = 0;
  Gate gate;
  ASSERT_EQ(launch_gated_write(there, &gate, &cell, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(event, there), CUDA_SUCCESS);
  ASSERT_EQ(api().ctxSetCurrent(context_), CUDA_SUCCESS);
  EXPECT_EQ(api().eventRecord(event, nullptr), CUDA_ERROR_INVALID_HANDLE);  // this context's legacy stream
  // Waiting across contexts is allowed, and orders the work.
  ASSERT_EQ(api().streamWaitEvent(here, event, 0), CUDA_SUCCESS);
  Gate open;
  open.release();
  ASSERT_EQ(launch_gated_write(here, &open, &cell, 2), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cell, 0);
  gate.release();
  ASSERT_EQ(api().streamSynchronize(here), CUDA_SUCCESS);
  EXPECT_EQ(cell, 2);
  EXPECT_EQ(api().eventDestroy(event), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(here), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(there), CUDA_SUCCESS);
}

TEST_F(SimTwoContexts, EachContextHasItsOwnLegacyStream) {
  ASSERT_EQ(api().ctxSetCurrent(other_), CUDA_SUCCESS);
  CUstream blocking_there = nullptr;
  CUevent legacy_there = nullptr;
  ASSERT_EQ(api().streamCreate(&blocking_there, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().eventCreate(&legacy_there, 0), CUDA_SUCCESS);
  int cell = 0;
  Gate gate;
  ASSERT_EQ(launch_gated_write(blocking_there, &gate, &cell, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(legacy_there, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().ctxSetCurrent(context_), CUDA_SUCCESS);
  CUevent legacy_here = nullptr;
  ASSERT_EQ(api().eventCreate(&legacy_here, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(legacy_here, nullptr), CUDA_SUCCESS);
  // This context's legacy stream does not wait for the other context's blocking stream.
  EXPECT_TRUE(eventually([&] { return api().eventQuery(legacy_here) == CUDA_SUCCESS; }));
  EXPECT_EQ(api().eventQuery(legacy_there), CUDA_ERROR_NOT_READY);
  gate.release();
  ASSERT_EQ(api().eventSynchronize(legacy_there), CUDA_SUCCESS);
  EXPECT_EQ(cell, 1);
  EXPECT_EQ(api().eventDestroy(legacy_here), CUDA_SUCCESS);
  EXPECT_EQ(api().eventDestroy(legacy_there), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(blocking_there), CUDA_SUCCESS);
}

TEST_F(SimTwoContexts, PointerAttributesNameTheAllocatingContextAndDevice) {
  ASSERT_EQ(api().ctxSetCurrent(other_), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().ctxSetCurrent(context_), CUDA_SUCCESS);
  CUcontext owner = nullptr;
  int ordinal = -1;
  ASSERT_EQ(api().pointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p), CUDA_SUCCESS);
  ASSERT_EQ(api().pointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p), CUDA_SUCCESS);
  EXPECT_EQ(owner, other_);
  EXPECT_EQ(ordinal, 1);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
}

// Launches a write of `value` to `target` from the current context and
// synchronises: whether the kernel faulted for want of access (then the
// sticky error is cleared for the next step).
bool write_faults(int* target, int value) {
  static auto faults = sim_control<std::uint64_t (*)()>("tidepool_sim_access_faults");
  const std::uint64_t before = faults();
  Gate open;
  open.release();
  EXPECT_EQ(launch_gated_write(nullptr, &open, target, value), CUDA_SUCCESS);
  const CUresult synced = sim_driver().api().ctxSynchronize();
  const bool faulted = faults() > before;
  EXPECT_EQ(synced, faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS);
  if (faulted) sim_control<void (*)()>("tidepool_sim_clear_faults")();
  return faulted;
}

// A VMM mapping answers only to the devices its access list names, one
// device's flags changing nothing of another's: a kernel on a device it does
// not name faults, as on a GPU (and the sim used to let any device in).
TEST_F(SimTwoContexts, AVmmMappingAnswersOnlyToTheDevicesItsAccessListNames) {
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, page_, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h = create_page();
  map_rw(va, h);  // device 0 only
  auto* word = reinterpret_cast<int*>(va);
  const auto set_access = [&](int device, CUmemAccess_flags flags) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = flags;
    return api().memSetAccess(va, page_, &access, 1);
  };
  ASSERT_EQ(api().ctxSetCurrent(other_), CUDA_SUCCESS);
  EXPECT_TRUE(write_faults(word, 1));
  ASSERT_EQ(set_access(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  EXPECT_FALSE(write_faults(word, 2));
  EXPECT_EQ(*word, 2);
  ASSERT_EQ(set_access(1, CU_MEM_ACCESS_FLAGS_PROT_NONE), CUDA_SUCCESS);
  EXPECT_TRUE(write_faults(word, 3));
  ASSERT_EQ(api().ctxSetCurrent(context_), CUDA_SUCCESS);
  EXPECT_FALSE(write_faults(word, 4));  // device 0 kept its access
  EXPECT_EQ(*word, 4);
  EXPECT_EQ(set_access(2, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(va, page_), CUDA_SUCCESS);
}

// Another device's cuMemAlloc memory is reachable only while peer access to
// it is enabled from the kernel's context; the driver's errors for enabling
// twice, disabling what is not enabled, and a context's own device.
TEST_F(SimTwoContexts, CuMemAllocMemoryOfAnotherDeviceNeedsPeerAccess) {
  auto enable = entry<decltype(&::cuCtxEnablePeerAccess)>("cuCtxEnablePeerAccess");
  auto disable = entry<decltype(&::cuCtxDisablePeerAccess)>("cuCtxDisablePeerAccess");
  auto can_access = entry<decltype(&::cuDeviceCanAccessPeer)>("cuDeviceCanAccessPeer");
  int can = -1;
  ASSERT_EQ(can_access(&can, 1, 0), CUDA_SUCCESS);
  EXPECT_EQ(can, 1);
  ASSERT_EQ(can_access(&can, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(can, 0);
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, sizeof(int)), CUDA_SUCCESS);  // device 0's
  auto* word = reinterpret_cast<int*>(p);
  ASSERT_EQ(api().ctxSetCurrent(other_), CUDA_SUCCESS);
  EXPECT_TRUE(write_faults(word, 1));
  EXPECT_EQ(enable(context_, 1), CUDA_ERROR_INVALID_VALUE);  // no flags are defined
  EXPECT_EQ(enable(other_, 0), CUDA_ERROR_INVALID_DEVICE);   // its own device
  EXPECT_EQ(disable(context_), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  ASSERT_EQ(enable(context_, 0), CUDA_SUCCESS);
  EXPECT_EQ(enable(context_, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  EXPECT_FALSE(write_faults(word, 2));
  EXPECT_EQ(*word, 2);
  ASSERT_EQ(disable(context_), CUDA_SUCCESS);
  EXPECT_TRUE(write_faults(word, 3));
  EXPECT_EQ(*word, 2);  // the faulting kernel wrote nothing
  ASSERT_EQ(api().ctxSetCurrent(context_), CUDA_SUCCESS);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
}

// --- stream capture --------------------------------------------------------------------------------------

TEST_F(Sim, CapturedWorkIsRecordedNotRun) {
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(p, 0, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  CUdeviceptr other = 0;
  ASSERT_EQ(api().memAlloc(&other, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(other, 0x5A, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  CUevent event = nullptr;
  ASSERT_EQ(api().eventCreate(&event, 0), CUDA_SUCCESS);
  int cell = 0;
  Gate open;
  open.release();
  std::atomic<int> host_calls{0};
  const int source = 0x11223344;

  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(launch_gated_write(stream, &open, &cell, 7), CUDA_SUCCESS);
  EXPECT_EQ(api().memsetD8Async(p, 0xAB, 16, stream), CUDA_SUCCESS);
  EXPECT_EQ(api().memcpyHtoDAsync(p + 16, &source, sizeof source, stream), CUDA_SUCCESS);
  EXPECT_EQ(api().memcpyDtoDAsync(p + 32, other, 16, stream), CUDA_SUCCESS);
  EXPECT_EQ(capture_api().launch_host_func(stream, count_call, &host_calls), CUDA_SUCCESS);
  EXPECT_EQ(api().eventRecord(event, stream), CUDA_SUCCESS);
  end_and_destroy(stream);

  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(cell, 0);
  EXPECT_EQ(host_calls.load(), 0);
  const auto* bytes = reinterpret_cast<const unsigned char*>(p);
  EXPECT_TRUE(std::all_of(bytes, bytes + 64, [](unsigned char c) { return c == 0; }));
  // Once capture ends, work runs again.
  ASSERT_EQ(launch_gated_write(stream, &open, &cell, 7), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(cell, 7);
  EXPECT_EQ(api().eventDestroy(event), CUDA_SUCCESS);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
  EXPECT_EQ(api().memFree(other), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

// cuStreamBeginCaptureToGraph adds what a stream captures to the program's
// own graph, after the nodes it names; cuStreamEndCapture (in either form)
// hands that graph back, and launching it runs both captures' nodes in order.
TEST_F(Sim, ACaptureIntoTheProgramsGraphAddsNodesAfterTheNamedOnes) {
  const auto create = entry<decltype(&::cuGraphCreate)>("cuGraphCreate");
  const auto begin_into = entry<decltype(&::cuStreamBeginCaptureToGraph)>("cuStreamBeginCaptureToGraph");
  const auto end_ptsz = entry<EndCapturePtsz>("cuStreamEndCapture_ptsz");
  const auto get_nodes = entry<decltype(&::cuGraphGetNodes)>("cuGraphGetNodes");
  const auto instantiate = entry<decltype(&::cuGraphInstantiateWithFlags)>("cuGraphInstantiateWithFlags");
  const auto launch = entry<decltype(&::cuGraphLaunch)>("cuGraphLaunch");
  const auto destroy_exec = entry<decltype(&::cuGraphExecDestroy)>("cuGraphExecDestroy");
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(p, 0, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  CUgraph graph = nullptr;
  EXPECT_EQ(create(&graph, 1), CUDA_ERROR_INVALID_VALUE) << "flags must be 0";
  ASSERT_EQ(create(&graph, 0), CUDA_SUCCESS);
  const auto mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  EXPECT_EQ(begin_into(stream, nullptr, nullptr, nullptr, 0, mode), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(begin_into(stream, graph, nullptr, nullptr, 1, mode), CUDA_ERROR_INVALID_VALUE) << "no dependencies given";
  EXPECT_EQ(begin_into(nullptr, graph, nullptr, nullptr, 0, mode), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);

  ASSERT_EQ(begin_into(stream, graph, nullptr, nullptr, 0, mode), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8Async(p, 0x11, 16, stream), CUDA_SUCCESS);
  CUgraph seen = nullptr;
  CUstreamCaptureStatus status{};
  ASSERT_EQ(capture_api().info(stream, &status, nullptr, &seen, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(seen, graph) << "the capture's graph is the program's";
  EXPECT_EQ(capture_api().destroy_graph(graph), CUDA_ERROR_ILLEGAL_STATE) << "destroyed while captured into";
  CUgraph ended = nullptr;
  ASSERT_EQ(capture_api().end(stream, &ended), CUDA_SUCCESS);
  EXPECT_EQ(ended, graph);
  CUgraphNode first = nullptr;
  std::size_t count = 1;
  ASSERT_EQ(get_nodes(graph, &first, &count), CUDA_SUCCESS);
  ASSERT_EQ(count, 1u);

  // A node of another graph is no dependency here.
  CUstream other = nullptr;
  ASSERT_EQ(api().streamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(capture_api().begin(other, mode), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8Async(p, 0x33, 4, other), CUDA_SUCCESS);
  CUgraph foreign_graph = nullptr;
  ASSERT_EQ(capture_api().end(other, &foreign_graph), CUDA_SUCCESS);
  CUgraphNode foreign = nullptr;
  count = 1;
  ASSERT_EQ(get_nodes(foreign_graph, &foreign, &count), CUDA_SUCCESS);
  EXPECT_EQ(begin_into(stream, graph, &foreign, nullptr, 1, mode), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_NONE);

  // A second capture after the first node, ended in the per-thread form.
  ASSERT_EQ(begin_into(stream, graph, &first, nullptr, 1, mode), CUDA_SUCCESS);
  const CUgraphNode* frontier = nullptr;
  std::size_t frontier_size = 0;
  ASSERT_EQ(capture_api().info(stream, &status, nullptr, nullptr, &frontier, nullptr, &frontier_size), CUDA_SUCCESS);
  ASSERT_EQ(frontier_size, 1u);
  EXPECT_EQ(frontier[0], first) << "the next node follows the named one";
  ASSERT_EQ(api().memsetD8Async(p, 0x22, 8, stream), CUDA_SUCCESS);
  ended = nullptr;
  ASSERT_EQ(end_ptsz(stream, &ended), CUDA_SUCCESS);
  EXPECT_EQ(ended, graph);
  count = 0;
  ASSERT_EQ(get_nodes(graph, nullptr, &count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2u);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(instantiate(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(launch(exec, stream), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  const auto* bytes = reinterpret_cast<const unsigned char*>(p);
  EXPECT_TRUE(std::all_of(bytes, bytes + 8, [](unsigned char c) { return c == 0x22; }));
  EXPECT_TRUE(std::all_of(bytes + 8, bytes + 16, [](unsigned char c) { return c == 0x11; }));
  EXPECT_EQ(bytes[16], 0);
  EXPECT_EQ(destroy_exec(exec), CUDA_SUCCESS);
  EXPECT_EQ(capture_api().destroy_graph(graph), CUDA_SUCCESS);
  EXPECT_EQ(capture_api().destroy_graph(foreign_graph), CUDA_SUCCESS);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(other), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

// An instantiated graph runs what was captured, in capture order, each time
// it is launched; its kernel nodes give back their function and arguments.
TEST_F(Sim, AnInstantiatedGraphRunsItsCapturedWorkEachTimeItIsLaunched) {
  const auto instantiate = entry<decltype(&::cuGraphInstantiateWithFlags)>("cuGraphInstantiateWithFlags");
  const auto launch = entry<decltype(&::cuGraphLaunch)>("cuGraphLaunch");
  const auto destroy_exec = entry<decltype(&::cuGraphExecDestroy)>("cuGraphExecDestroy");
  const auto get_nodes = entry<decltype(&::cuGraphGetNodes)>("cuGraphGetNodes");
  const auto node_type = entry<decltype(&::cuGraphNodeGetType)>("cuGraphNodeGetType");
  const auto kernel_params = entry<decltype(&::cuGraphKernelNodeGetParams_v2)>("cuGraphKernelNodeGetParams_v2");
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(p, 0, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  int cell = 0;
  Gate open;
  open.release();
  std::atomic<int> host_calls{0};
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8Async(p, 0xAB, 16, stream), CUDA_SUCCESS);
  ASSERT_EQ(launch_gated_write(stream, &open, &cell, 7), CUDA_SUCCESS);
  ASSERT_EQ(capture_api().launch_host_func(stream, count_call, &host_calls), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(capture_api().end(stream, &graph), CUDA_SUCCESS);
  std::size_t count = 0;
  ASSERT_EQ(get_nodes(graph, nullptr, &count), CUDA_SUCCESS);
  ASSERT_EQ(count, 3u);
  std::vector<CUgraphNode> nodes(count);
  ASSERT_EQ(get_nodes(graph, nodes.data(), &count), CUDA_SUCCESS);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_EQ(node_type(nodes[1], &type), CUDA_SUCCESS);
  ASSERT_EQ(type, CU_GRAPH_NODE_TYPE_KERNEL);
  CUDA_KERNEL_NODE_PARAMS params{};
  ASSERT_EQ(kernel_params(nodes[1], &params), CUDA_SUCCESS);
  EXPECT_NE(params.func, nullptr);
  ASSERT_NE(params.kernelParams, nullptr);
  EXPECT_EQ(*static_cast<int**>(params.kernelParams[1]), &cell) << "the captured arguments";
  EXPECT_EQ(kernel_params(nodes[0], &params), CUDA_ERROR_INVALID_VALUE) << "not a kernel node";
  EXPECT_EQ(cell, 0) << "captured, not run";
  CUgraphExec exec = nullptr;
  ASSERT_EQ(instantiate(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(launch(exec, stream), CUDA_SUCCESS);
  ASSERT_EQ(launch(exec, stream), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(cell, 7);
  EXPECT_EQ(host_calls.load(), 2);
  const auto* bytes = reinterpret_cast<const unsigned char*>(p);
  EXPECT_TRUE(std::all_of(bytes, bytes + 16, [](unsigned char c) { return c == 0xAB; }));
  EXPECT_EQ(bytes[16], 0);
  EXPECT_EQ(destroy_exec(exec), CUDA_SUCCESS);
  EXPECT_EQ(launch(exec, stream), CUDA_ERROR_INVALID_VALUE) << "destroyed";
  EXPECT_EQ(capture_api().destroy_graph(graph), CUDA_SUCCESS);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

// Copy and set nodes keep their parameters, as a GPU's do, and a graph
// copied into another as a child-graph node runs with it and can be read
// back (what the preload reads to hold a graph's blocks).
TEST_F(Sim, CopyAndSetNodesKeepTheirParametersAndAChildGraphRunsWithItsParent) {
  const auto instantiate = entry<decltype(&::cuGraphInstantiateWithFlags)>("cuGraphInstantiateWithFlags");
  const auto launch = entry<decltype(&::cuGraphLaunch)>("cuGraphLaunch");
  const auto destroy_exec = entry<decltype(&::cuGraphExecDestroy)>("cuGraphExecDestroy");
  const auto get_nodes = entry<decltype(&::cuGraphGetNodes)>("cuGraphGetNodes");
  const auto node_type = entry<decltype(&::cuGraphNodeGetType)>("cuGraphNodeGetType");
  const auto copy_params = entry<decltype(&::cuGraphMemcpyNodeGetParams)>("cuGraphMemcpyNodeGetParams");
  const auto set_params = entry<decltype(&::cuGraphMemsetNodeGetParams)>("cuGraphMemsetNodeGetParams");
  const auto add_child = entry<decltype(&::cuGraphAddChildGraphNode)>("cuGraphAddChildGraphNode");
  const auto child_of = entry<decltype(&::cuGraphChildGraphNodeGetGraph)>("cuGraphChildGraphNodeGetGraph");
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  ASSERT_EQ(api().memAlloc(&a, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().memAlloc(&b, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(a, 1, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(b, 0, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs
  std::vector<unsigned char> host(64, 0);

  CUgraph inner = nullptr;
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8Async(a + 8, 0x3C, 100, stream), CUDA_SUCCESS);
  ASSERT_EQ(api().memcpyDtoDAsync(b + 64, a, 512, stream), CUDA_SUCCESS);
  ASSERT_EQ(capture_api().end(stream, &inner), CUDA_SUCCESS);
  std::array<CUgraphNode, 2> nodes{};
  std::size_t count = nodes.size();
  ASSERT_EQ(get_nodes(inner, nodes.data(), &count), CUDA_SUCCESS);
  ASSERT_EQ(count, 2u);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_EQ(node_type(nodes[0], &type), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_MEMSET);
  CUDA_MEMSET_NODE_PARAMS set{};
  ASSERT_EQ(set_params(nodes[0], &set), CUDA_SUCCESS);
  EXPECT_EQ(set.dst, a + 8);
  EXPECT_EQ(set.value, 0x3Cu);
  EXPECT_EQ(set.elementSize, 1u);
  EXPECT_EQ(set.width, 100u);
  ASSERT_EQ(node_type(nodes[1], &type), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_MEMCPY);
  CUDA_MEMCPY3D copy{};
  ASSERT_EQ(copy_params(nodes[1], &copy), CUDA_SUCCESS);
  EXPECT_EQ(copy.srcMemoryType, CU_MEMORYTYPE_DEVICE);
  EXPECT_EQ(copy.srcDevice, a);
  EXPECT_EQ(copy.dstMemoryType, CU_MEMORYTYPE_DEVICE);
  EXPECT_EQ(copy.dstDevice, b + 64);
  EXPECT_EQ(copy.WidthInBytes, 512u);
  EXPECT_EQ(set_params(nodes[1], &set), CUDA_ERROR_INVALID_VALUE) << "not a memset node";

  CUgraph outer = nullptr;
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8Async(a, 2, 8, stream), CUDA_SUCCESS);
  ASSERT_EQ(capture_api().end(stream, &outer), CUDA_SUCCESS);
  CUgraphNode child = nullptr;
  ASSERT_EQ(add_child(&child, outer, nullptr, 0, inner), CUDA_SUCCESS);
  EXPECT_EQ(add_child(&child, outer, nullptr, 0, outer), CUDA_ERROR_INVALID_VALUE) << "a graph in itself";
  ASSERT_EQ(node_type(child, &type), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_GRAPH);
  CUgraph copied = nullptr;
  ASSERT_EQ(child_of(child, &copied), CUDA_SUCCESS);
  EXPECT_NE(copied, inner) << "the node owns a copy";
  count = nodes.size();
  ASSERT_EQ(get_nodes(copied, nodes.data(), &count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2u);
  ASSERT_EQ(capture_api().destroy_graph(inner), CUDA_SUCCESS);  // the copy lives on in `outer`
  CUgraphExec exec = nullptr;
  ASSERT_EQ(instantiate(&exec, outer, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().memcpyDtoH(host.data(), b + 64, host.size()), CUDA_SUCCESS);
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](unsigned char c) { return c == 0; })) << "not run yet";
  ASSERT_EQ(launch(exec, stream), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  ASSERT_EQ(api().memcpyDtoH(host.data(), b + 64, host.size()), CUDA_SUCCESS);
  // b[64..] = a[0..512): a[0..8) set to 2 by the parent first, a[8..108) 0x3C, the rest 1.
  for (std::size_t i = 0; i < host.size(); ++i) {
    const unsigned char want = i < 8 ? 2 : i < 108 ? 0x3C : 1;
    ASSERT_EQ(host[i], want) << "byte " << i;
  }
  EXPECT_EQ(destroy_exec(exec), CUDA_SUCCESS);
  EXPECT_EQ(capture_api().destroy_graph(outer), CUDA_SUCCESS);
  count = nodes.size();
  EXPECT_EQ(get_nodes(copied, nodes.data(), &count), CUDA_ERROR_INVALID_VALUE) << "gone with its parent";
  EXPECT_EQ(api().memFree(a), CUDA_SUCCESS);
  EXPECT_EQ(api().memFree(b), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

TEST_F(Sim, CaptureInfoReportsStatusIdGraphAndDependencies) {
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  Gate open;
  open.release();
  int cell = 0;
  CUstreamCaptureStatus status{};
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  const CUgraphNode* deps = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  std::size_t count = 99;
  ASSERT_EQ(capture_api().info(stream, &status, &id, &graph, &deps, &edges, &count), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);

  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(capture_api().info(stream, &status, &id, &graph, &deps, &edges, &count), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  const cuuint64_t first_id = id;
  EXPECT_NE(first_id, 0u);
  EXPECT_NE(graph, nullptr);
  EXPECT_EQ(count, 0u);
  ASSERT_EQ(launch_gated_write(stream, &open, &cell, 1), CUDA_SUCCESS);
  ASSERT_EQ(capture_api().info(stream, &status, &id, &graph, &deps, &edges, &count), CUDA_SUCCESS);
  ASSERT_EQ(count, 1u);  // the next node depends on the captured kernel
  EXPECT_NE(deps[0], nullptr);
  EXPECT_NE(edges, nullptr);
  EXPECT_EQ(capture_api().info(stream, &status, &id, &graph, nullptr, &edges, &count), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(capture_api().info(stream, nullptr, &id, nullptr, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  // The older variants answer the same.
  auto info_v1 = entry<CaptureInfoV1>("cuStreamGetCaptureInfo");
  auto info_v2 = entry<CaptureInfoV2>("cuStreamGetCaptureInfo_v2");
  cuuint64_t other_id = 0;
  ASSERT_EQ(info_v1(stream, &status, &other_id), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(other_id, first_id);
  ASSERT_EQ(info_v2(stream, &status, &other_id, &graph, &deps, &count), CUDA_SUCCESS);
  EXPECT_EQ(other_id, first_id);
  EXPECT_EQ(count, 1u);
  end_and_destroy(stream);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_NONE);

  // Each capture sequence has an id of its own.
  ASSERT_EQ(entry<BeginCaptureV1>("cuStreamBeginCapture")(stream), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_NE(capture_id(stream), first_id);
  end_and_destroy(stream);
  EXPECT_EQ(cell, 0);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

TEST_F(Sim, CaptureBeginsAndEndsOnlyWhereTheDriverAllows) {
  CUstream stream = nullptr;
  CUstream side = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api().streamCreate(&side, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  EXPECT_EQ(capture_api().end(stream, &graph), CUDA_ERROR_ILLEGAL_STATE);  // not capturing
  EXPECT_EQ(capture_api().begin(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_api().begin(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_api().begin(stream, static_cast<CUstreamCaptureMode>(3)), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(capture_api().end(stream, nullptr), CUDA_ERROR_INVALID_VALUE);
  // A global capture ends on the thread that began it.
  CUresult other_thread = CUDA_SUCCESS;
  std::thread([&] { other_thread = capture_api().end(stream, &graph); }).join();
  EXPECT_EQ(other_thread, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  // A stream forked into the capture cannot end it.
  CUevent fork = nullptr;
  CUevent join = nullptr;
  ASSERT_EQ(api().eventCreate(&fork, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().eventCreate(&join, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(fork, stream), CUDA_SUCCESS);
  ASSERT_EQ(api().streamWaitEvent(side, fork, 0), CUDA_SUCCESS);
  EXPECT_EQ(capture_api().end(side, &graph), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
  ASSERT_EQ(api().eventRecord(join, side), CUDA_SUCCESS);
  ASSERT_EQ(api().streamWaitEvent(stream, join, 0), CUDA_SUCCESS);
  end_and_destroy(stream);
  // A relaxed capture may end on any thread.
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  graph = nullptr;
  std::thread([&] { other_thread = capture_api().end(stream, &graph); }).join();
  EXPECT_EQ(other_thread, CUDA_SUCCESS);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(capture_api().destroy_graph(graph), CUDA_SUCCESS);
  EXPECT_EQ(capture_api().destroy_graph(graph), CUDA_ERROR_INVALID_VALUE);  // gone
  EXPECT_EQ(api().eventDestroy(fork), CUDA_SUCCESS);
  EXPECT_EQ(api().eventDestroy(join), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(side), CUDA_SUCCESS);
}

TEST_F(Sim, SynchronizingOrQueryingACapturingStreamFailsAndInvalidatesTheCapture) {
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, 4096), CUDA_SUCCESS);
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(api().streamSynchronize(stream), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(api().memsetD8Async(p, 1, 1, stream), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  end_invalidated(stream);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);  // usable again

  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(api().streamQuery(stream), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  end_invalidated(stream);
  EXPECT_EQ(api().streamQuery(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

TEST_F(Sim, LegacyStreamUseWhileABlockingStreamCapturesIsImplicitAndInvalidates) {
  CUstream blocking = nullptr;
  CUstream non_blocking = nullptr;
  ASSERT_EQ(api().streamCreate(&blocking, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().streamCreate(&non_blocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().memsetD8(p, 0, 4096), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);  // a set returns before it runs

  ASSERT_EQ(capture_api().begin(blocking, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  // Asking is answered, and does not invalidate.
  CUstreamCaptureStatus status{};
  EXPECT_EQ(api().streamIsCapturing(nullptr, &status), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(api().streamIsCapturing(CU_STREAM_LEGACY, &status), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(capture_api().info(nullptr, &status, nullptr, nullptr, nullptr, nullptr, nullptr),
            CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(capture_status(blocking), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  // Using it is refused, not run, and invalidates the capture.
  EXPECT_EQ(api().memsetD8Async(p, 1, 1, nullptr), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(capture_status(blocking), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  end_invalidated(blocking);
  EXPECT_EQ(capture_status(nullptr), CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(*reinterpret_cast<const unsigned char*>(p), 0);

  // Synchronising it, or a synchronous copy on it, the same.
  ASSERT_EQ(capture_api().begin(blocking, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(api().streamSynchronize(nullptr), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(capture_status(blocking), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  end_invalidated(blocking);
  ASSERT_EQ(capture_api().begin(blocking, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(api().memsetD8(p, 2, 1), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  end_invalidated(blocking);
  EXPECT_EQ(*reinterpret_cast<const unsigned char*>(p), 0);

  // A non-blocking stream's capture leaves the legacy stream alone.
  ASSERT_EQ(capture_api().begin(non_blocking, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(nullptr), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(api().memsetD8(p, 3, 1), CUDA_SUCCESS);
  EXPECT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(non_blocking), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  end_and_destroy(non_blocking);
  EXPECT_EQ(*reinterpret_cast<const unsigned char*>(p), 3);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(blocking), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(non_blocking), CUDA_SUCCESS);
}

TEST_F(Sim, EventRecordedInCaptureCannotBeQueriedOrSynchronized) {
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent event = nullptr;
  CUevent plain = nullptr;
  ASSERT_EQ(api().eventCreate(&event, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().eventCreate(&plain, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(plain, stream), CUDA_SUCCESS);
  ASSERT_EQ(api().eventSynchronize(plain), CUDA_SUCCESS);
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(event, stream), CUDA_SUCCESS);  // captured
  EXPECT_EQ(api().eventQuery(event), CUDA_ERROR_CAPTURED_EVENT);
  EXPECT_EQ(api().eventSynchronize(event), CUDA_ERROR_CAPTURED_EVENT);
  float ms = 0;
  EXPECT_EQ(entry<ElapsedTimeV1>("cuEventElapsedTime")(&ms, plain, event), CUDA_ERROR_CAPTURED_EVENT);
  EXPECT_EQ(api().eventQuery(plain), CUDA_SUCCESS);  // recorded before the capture: unaffected
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  end_and_destroy(stream);
  EXPECT_EQ(api().eventQuery(event), CUDA_SUCCESS);
  EXPECT_EQ(api().eventDestroy(event), CUDA_SUCCESS);
  EXPECT_EQ(api().eventDestroy(plain), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

TEST_F(Sim, WaitingOnACapturedEventJoinsTheStreamIntoTheCapture) {
  CUstream origin = nullptr;
  CUstream side = nullptr;
  ASSERT_EQ(api().streamCreate(&origin, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api().streamCreate(&side, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent fork = nullptr;
  CUevent join = nullptr;
  ASSERT_EQ(api().eventCreate(&fork, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().eventCreate(&join, 0), CUDA_SUCCESS);
  int cell = 0;
  Gate open;
  open.release();

  ASSERT_EQ(capture_api().begin(origin, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(launch_gated_write(origin, &open, &cell, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(fork, origin), CUDA_SUCCESS);
  ASSERT_EQ(api().streamWaitEvent(side, fork, 0), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(side), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(capture_id(side), capture_id(origin));
  ASSERT_EQ(launch_gated_write(side, &open, &cell, 2), CUDA_SUCCESS);  // captured too
  ASSERT_EQ(api().eventRecord(join, side), CUDA_SUCCESS);
  ASSERT_EQ(api().streamWaitEvent(origin, join, 0), CUDA_SUCCESS);
  end_and_destroy(origin);
  EXPECT_EQ(capture_status(side), CU_STREAM_CAPTURE_STATUS_NONE);  // the capture ended for both
  ASSERT_EQ(api().streamSynchronize(side), CUDA_SUCCESS);
  EXPECT_EQ(cell, 0);

  // A fork never joined back: the capture fails to end, and ends for both.
  ASSERT_EQ(capture_api().begin(origin, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(fork, origin), CUDA_SUCCESS);
  ASSERT_EQ(api().streamWaitEvent(side, fork, 0), CUDA_SUCCESS);
  ASSERT_EQ(launch_gated_write(side, &open, &cell, 3), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  EXPECT_EQ(capture_api().end(origin, &graph), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
  EXPECT_EQ(graph, nullptr);
  EXPECT_EQ(capture_status(side), CU_STREAM_CAPTURE_STATUS_NONE);

  // Two capture sequences do not merge.
  ASSERT_EQ(capture_api().begin(origin, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(capture_api().begin(side, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(api().eventRecord(fork, origin), CUDA_SUCCESS);
  EXPECT_EQ(api().streamWaitEvent(side, fork, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
  end_invalidated(side);
  end_invalidated(origin);

  // A capturing stream cannot depend on work outside the capture.
  ASSERT_EQ(api().eventRecord(join, side), CUDA_SUCCESS);
  ASSERT_EQ(capture_api().begin(origin, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(api().streamWaitEvent(origin, join, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
  end_invalidated(origin);
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cell, 0);

  EXPECT_EQ(api().eventDestroy(fork), CUDA_SUCCESS);
  EXPECT_EQ(api().eventDestroy(join), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(origin), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(side), CUDA_SUCCESS);
}

// cuMemAlloc from another thread of the test, with this test's context.
CUresult alloc_and_free_on_another_thread(CUcontext context, CUstreamCaptureMode mode) {
  CUresult result = CUDA_SUCCESS;
  std::thread([&] {
    const driver::Api& api = sim_driver().api();
    api.ctxSetCurrent(context);
    CUstreamCaptureMode previous = mode;
    capture_api().exchange_mode(&previous);
    CUdeviceptr p = 0;
    result = api.memAlloc(&p, 4096);
    if (result == CUDA_SUCCESS) result = api.memFree(p);
    capture_api().exchange_mode(&previous);
  }).join();
  return result;
}

TEST_F(Sim, UnsafeCallsDuringCaptureFollowTheThreadsCaptureMode) {
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  void* host = nullptr;

  // Global capture: refused on this thread, and invalidates the capture.
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(api().memAlloc(&p, 4096), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  end_invalidated(stream);
  for (auto unsafe : std::vector<std::function<CUresult()>>{
           [&] { return api().memFree(p); },
           [&] { return api().memAllocHost(&host, 4096); },
           [&] {
             std::size_t pitch = 0;
             return api().memAllocPitch(&p, &pitch, 64, 64, 4);
           },
           [&] { return api().ctxSynchronize(); },
       }) {
    ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    EXPECT_EQ(unsafe(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_invalidated(stream);
  }
  // ... and on another thread in global mode, not on one in thread-local or relaxed mode.
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(alloc_and_free_on_another_thread(context_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  EXPECT_EQ(alloc_and_free_on_another_thread(context_, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(alloc_and_free_on_another_thread(context_, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  end_invalidated(stream);

  // Thread-local capture: other threads are free, this one is not.
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  EXPECT_EQ(alloc_and_free_on_another_thread(context_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(api().memAlloc(&p, 4096), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  end_invalidated(stream);

  // Relaxed capture: allowed.
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(api().memAlloc(&p, 4096), CUDA_SUCCESS);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
  EXPECT_EQ(alloc_and_free_on_another_thread(context_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  end_and_destroy(stream);

  // A thread that switches itself to relaxed may make them during its own global capture.
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_EQ(capture_api().exchange_mode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);  // the previous mode
  ASSERT_EQ(api().memAlloc(&p, 4096), CUDA_SUCCESS);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
  ASSERT_EQ(capture_api().exchange_mode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_RELAXED);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  end_and_destroy(stream);
  EXPECT_EQ(capture_api().exchange_mode(nullptr), CUDA_ERROR_INVALID_VALUE);
  mode = static_cast<CUstreamCaptureMode>(3);
  EXPECT_EQ(capture_api().exchange_mode(&mode), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

// A context cuCtxCreate makes is current at once, on its device, with a
// legacy stream of its own: the first context's legacy stream does not wait
// for it. cuCtxDestroy waits for its work, and its handle is refused after.
TEST_F(Sim, ACreatedContextHasALegacyStreamOfItsOwnAndIsGoneOnceDestroyed) {
  const auto create = entry<CtxCreateV2>("cuCtxCreate_v2");
  const auto create_v3 = entry<CtxCreateV3>("cuCtxCreate_v3");
  const auto create_v4 = entry<decltype(&::cuCtxCreate_v4)>("cuCtxCreate_v4");
  const auto destroy = entry<decltype(&::cuCtxDestroy_v2)>("cuCtxDestroy_v2");
  CUcontext made = nullptr;
  EXPECT_EQ(create(nullptr, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(create(&made, 0, 99), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(create(&made, 0x10000, 0), CUDA_ERROR_INVALID_VALUE) << "an unknown flag";
  CUexecAffinityParam affinity{};
  EXPECT_EQ(create_v3(&made, &affinity, 1, 0, 0), CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
  CUctxCreateParams params{};
  ASSERT_EQ(create_v4(&made, &params, 0, 0), CUDA_SUCCESS);
  CUcontext current = nullptr;
  ASSERT_EQ(api().ctxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, made);
  EXPECT_NE(made, context_);
  CUdevice device = -1;
  ASSERT_EQ(api().ctxGetDevice(&device), CUDA_SUCCESS);
  EXPECT_EQ(device, 0);
  // Held on the created context's legacy stream: the first context's
  // legacy stream is not behind it.
  int cell = 0;
  Gate gate;
  ASSERT_EQ(launch_gated_write(nullptr, &gate, &cell, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().ctxSetCurrent(context_), CUDA_SUCCESS);
  EXPECT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS) << "the first context's legacy stream waited";
  EXPECT_EQ(cell, 0);
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    gate.release();
  });
  EXPECT_EQ(destroy(context_), CUDA_ERROR_INVALID_CONTEXT) << "a primary context";
  ASSERT_EQ(destroy(made), CUDA_SUCCESS);
  opener.join();
  EXPECT_EQ(cell, 1) << "destroyed before its work was done";
  EXPECT_EQ(api().ctxSetCurrent(made), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(destroy(made), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext current_now = nullptr;
  ASSERT_EQ(api().ctxGetCurrent(&current_now), CUDA_SUCCESS);
  EXPECT_EQ(current_now, context_) << "destroying another context leaves this thread's alone";
}

TEST_F(Sim, ContextSynchronizeDuringACaptureOfItsContextFailsInEveryMode) {
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(api().ctxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  end_invalidated(stream);
  EXPECT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

TEST_F(Sim, StreamOrderedAllocationStaysLegalDuringCaptureAsGraphMemoryNodes) {
  auto in_use = sim_control<std::size_t (*)()>("tidepool_sim_device_bytes_in_use");
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const std::size_t before = in_use();
  ASSERT_EQ(capture_api().begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAllocAsync(&p, 1 << 20, stream), CUDA_SUCCESS);
  EXPECT_NE(p, 0u);
  std::size_t count = 0;
  CUstreamCaptureStatus status{};
  ASSERT_EQ(capture_api().info(stream, &status, nullptr, nullptr, nullptr, nullptr, &count), CUDA_SUCCESS);
  EXPECT_EQ(count, 1u);  // the allocation node
  ASSERT_EQ(api().memFreeAsync(p, stream), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUgraph graph = nullptr;
  ASSERT_EQ(capture_api().end(stream, &graph), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(in_use(), before + (1 << 20));  // the captured free was not performed
  ASSERT_EQ(capture_api().destroy_graph(graph), CUDA_SUCCESS);
  EXPECT_EQ(in_use(), before);  // the graph both allocated and freed it
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

TEST_F(Sim, ForcedCaptureStatusChangesOnlyWhatIsReported) {
  auto set_capturing = sim_control<void (*)(CUstream, int)>("tidepool_sim_set_capturing");
  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  set_capturing(stream, 1);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  int cell = 0;
  Gate open;
  open.release();
  ASSERT_EQ(launch_gated_write(stream, &open, &cell, 4), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(cell, 4);
  set_capturing(stream, 0);
  EXPECT_EQ(capture_status(stream), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);
}

// --- pitched allocations -----------------------------------------------------------------------------

TEST_F(Sim, MemAllocPitchRejectsOverflowingSizesAndBadElementSizes) {
  CUdeviceptr p = 0;
  std::size_t pitch = 0;
  for (unsigned element : {0u, 1u, 2u, 3u, 12u, 32u}) {
    EXPECT_EQ(api().memAllocPitch(&p, &pitch, 100, 10, element), CUDA_ERROR_INVALID_VALUE) << element;
  }
  for (unsigned element : {4u, 8u, 16u}) {
    ASSERT_EQ(api().memAllocPitch(&p, &pitch, 100, 10, element), CUDA_SUCCESS) << element;
    EXPECT_GE(pitch, 100u);
    EXPECT_EQ(pitch % element, 0u);
    EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
  }
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  // Rounding the width up to the pitch overflows.
  EXPECT_EQ(api().memAllocPitch(&p, &pitch, kMax - 100, 1, 4), CUDA_ERROR_INVALID_VALUE);
  // pitch * height overflows to a small size.
  EXPECT_EQ(api().memAllocPitch(&p, &pitch, 512, (kMax / 512) + 2, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().memAllocPitch(&p, &pitch, std::size_t{1} << 40, (std::size_t{1} << 24) + 1, 4),
            CUDA_ERROR_INVALID_VALUE);
}

// --- sharing memory between processes ---------------------------------------------------------------

struct IpcApi {
  decltype(&::cuMemExportToShareableHandle) export_handle =
      entry<decltype(&::cuMemExportToShareableHandle)>("cuMemExportToShareableHandle");
  decltype(&::cuMemImportFromShareableHandle) import_handle =
      entry<decltype(&::cuMemImportFromShareableHandle)>("cuMemImportFromShareableHandle");
  decltype(&::cuMemGetAllocationPropertiesFromHandle) properties =
      entry<decltype(&::cuMemGetAllocationPropertiesFromHandle)>("cuMemGetAllocationPropertiesFromHandle");
  decltype(&::cuIpcGetMemHandle) get = entry<decltype(&::cuIpcGetMemHandle)>("cuIpcGetMemHandle");
  decltype(&::cuIpcOpenMemHandle_v2) open = entry<decltype(&::cuIpcOpenMemHandle_v2)>("cuIpcOpenMemHandle_v2");
  // The CUDA 4.1 name, exported beside the _v2 one with the same arguments.
  decltype(&::cuIpcOpenMemHandle_v2) open_v1 = entry<decltype(&::cuIpcOpenMemHandle_v2)>("cuIpcOpenMemHandle");
  decltype(&::cuIpcCloseMemHandle) close = entry<decltype(&::cuIpcCloseMemHandle)>("cuIpcCloseMemHandle");
  decltype(&::cuIpcGetEventHandle) get_event = entry<decltype(&::cuIpcGetEventHandle)>("cuIpcGetEventHandle");
  decltype(&::cuIpcOpenEventHandle) open_event = entry<decltype(&::cuIpcOpenEventHandle)>("cuIpcOpenEventHandle");
};

const IpcApi& ipc_api() {
  static const IpcApi api;
  return api;
}

void* as_os_handle(int fd) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)); }

std::string to_hex(const CUipcMemHandle& handle) {
  std::string out;
  for (const char byte : handle.reserved) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", static_cast<unsigned char>(byte));
    out += two;
  }
  return out;
}

CUipcMemHandle from_hex(const std::string& text) {
  CUipcMemHandle handle{};
  for (std::size_t i = 0; i < sizeof handle.reserved && 2 * i + 1 < text.size(); ++i) {
    handle.reserved[i] = static_cast<char>(std::stoi(text.substr(2 * i, 2), nullptr, 16));
  }
  return handle;
}

// The descriptor number a child of run_ipc_child finds the parent's
// descriptor under.
constexpr int kChildFd = 200;

// The child side of the IPC tests: this binary run again with
// TIDEPOOL_SIM_IPC_CHILD set does what it says before main, as a process of
// its own with the sim fresh, and exits 0, or 10 + the step that failed.
//   fd:SIZE                 imports descriptor kChildFd (a page of SIZE
//                           bytes on device 0), maps it, reads "from the
//                           parent" at 0, writes "from the child" at 64
//   legacy:HANDLE:STALE     opens HANDLE (a 10000-byte cuMemAlloc holding
//                           "from the parent"), uses it as device memory,
//                           writes back at 256, 512 and 1024; STALE must
//                           not open
int ipc_child(const std::string& spec) {
  alarm(10);  // a hang dies of SIGALRM
  int step = 0;
  auto check = [&step](bool passed) {
    ++step;
    if (!passed) {
      std::fprintf(stderr, "ipc child: step %d failed\n", step);
      std::_Exit(10 + step);
    }
  };
  const driver::Api& api = sim_driver().api();
  const IpcApi& ipc = ipc_api();
  const auto in_use = sim_control<std::size_t (*)()>("tidepool_sim_device_bytes_in_use");
  CUdevice device = 0;
  CUcontext context = nullptr;
  check(api.init(0) == CUDA_SUCCESS && api.deviceGet(&device, 0) == CUDA_SUCCESS &&
        api.devicePrimaryCtxRetain(&context, device) == CUDA_SUCCESS && api.ctxSetCurrent(context) == CUDA_SUCCESS);
  const std::size_t before = in_use();
  if (spec.rfind("fd:", 0) == 0) {
    const std::size_t size = std::stoul(spec.substr(3));
    CUmemGenericAllocationHandle h = 0;
    check(ipc.import_handle(&h, as_os_handle(kChildFd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_SUCCESS);
    check(::close(kChildFd) == 0);  // the caller's own to close; the import holds its own
    check(in_use() == before);      // the same memory as the parent's: no capacity taken
    CUmemAllocationProp prop{};
    check(ipc.properties(&prop, h) == CUDA_SUCCESS && prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
          prop.location.id == 0 && prop.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUdeviceptr va = 0;
    check(api.memAddressReserve(&va, size, 0, 0, 0) == CUDA_SUCCESS);
    check(api.memMap(va, size, 0, h, 0) == CUDA_SUCCESS);
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check(api.memSetAccess(va, size, &access, 1) == CUDA_SUCCESS);
    check(std::strcmp(reinterpret_cast<const char*>(va), "from the parent") == 0);
    std::strcpy(reinterpret_cast<char*>(va + 64), "from the child");
    check(api.memUnmap(va, size) == CUDA_SUCCESS && api.memRelease(h) == CUDA_SUCCESS);
    check(in_use() == before);
    check(api.memAddressFree(va, size) == CUDA_SUCCESS);
    return 0;
  }
  const std::size_t colon = spec.find(':', 7);
  check(spec.rfind("legacy:", 0) == 0 && colon != std::string::npos);
  const CUipcMemHandle handle = from_hex(spec.substr(7, colon - 7));
  const CUipcMemHandle stale = from_hex(spec.substr(colon + 1));
  CUdeviceptr p = 0;
  check(ipc.open(&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS && p != 0);
  check(in_use() == before);
  // Device memory to copies, kernels and queries.
  char text[16] = {};
  check(api.memcpyDtoH(text, p, sizeof text) == CUDA_SUCCESS && std::strcmp(text, "from the parent") == 0);
  testing::Gate open;
  open.release();
  check(testing::launch_gated_write(nullptr, &open, reinterpret_cast<int*>(p + 256), 42) == CUDA_SUCCESS);
  check(api.memsetD8(p + 512, 7, 16) == CUDA_SUCCESS);
  std::strcpy(reinterpret_cast<char*>(p + 1024), "from the child");
  check(api.ctxSynchronize() == CUDA_SUCCESS);
  CUdeviceptr start = 0;
  std::size_t range = 0;
  unsigned type = 0;
  check(api.pointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 10) == CUDA_SUCCESS && start == p);
  check(api.pointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) == CUDA_SUCCESS && range == 10000);
  check(api.pointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) == CUDA_SUCCESS &&
        type == CU_MEMORYTYPE_DEVICE);
  // Not this process's to free, nor to export again.
  check(api.memFree(p) == CUDA_ERROR_INVALID_VALUE);
  CUipcMemHandle again{};
  check(ipc.get(&again, p) == CUDA_ERROR_INVALID_VALUE);
  // Opened twice: the same address, closed once per open.
  CUdeviceptr second = 0;
  check(ipc.open_v1(&second, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS && second == p);
  check(ipc.close(p) == CUDA_SUCCESS);
  check(std::strcmp(reinterpret_cast<const char*>(p), "from the parent") == 0);  // still mapped
  check(ipc.close(p) == CUDA_SUCCESS);
  check(ipc.close(p) == CUDA_ERROR_INVALID_VALUE);
  // A handle of memory freed since (its descriptor number now another
  // allocation's) opens nothing.
  CUdeviceptr gone = 0;
  check(ipc.open(&gone, stale, 0) == CUDA_ERROR_INVALID_VALUE);
  check(in_use() == before);
  return 0;
}

[[maybe_unused]] const bool kIpcChild = [] {
  const char* spec = std::getenv("TIDEPOOL_SIM_IPC_CHILD");
  if (spec == nullptr) return false;
  std::_Exit(ipc_child(spec));
}();

// Runs ipc_child(spec) in a new process (this binary again), `fd` (if any)
// given to it as kChildFd. Its exit status, or 128 + the signal that killed it.
int run_ipc_child(const std::string& spec, int fd = -1) {
  std::vector<std::string> env_strings{"TIDEPOOL_SIM_IPC_CHILD=" + spec};
  for (char** e = ::environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe";
  char* argv[] = {self.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (fd >= 0) {
    EXPECT_NE(fd, kChildFd);  // dup2 onto itself would keep FD_CLOEXEC
    posix_spawn_file_actions_adddup2(&actions, fd, kChildFd);
  }
  pid_t child = 0;
  const int spawned = posix_spawn(&child, "/proc/self/exe", &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  int status = 0;
  if (waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class SimIpc : public Sim {
 protected:
  CUmemGenericAllocationHandle create_shareable(std::size_t size, CUmemLocationType where = CU_MEM_LOCATION_TYPE_DEVICE,
                                                int id = 0) {
    CUmemAllocationProp prop = device_prop();
    prop.location.type = where;
    prop.location.id = id;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle h = 0;
    EXPECT_EQ(api().memCreate(&h, size, &prop, 0), CUDA_SUCCESS);
    return h;
  }
  int export_fd(CUmemGenericAllocationHandle h) {
    int fd = -1;
    EXPECT_EQ(ipc_api().export_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
    return fd;
  }
  static std::size_t device_bytes() { return sim_control<std::size_t (*)()>("tidepool_sim_device_bytes_in_use")(); }
};

TEST_F(SimIpc, AShareableHandleImportedInTheSameProcessShowsTheSameBytesAtASecondAddress) {
  const IpcApi& ipc = ipc_api();
  CUmemGenericAllocationHandle h = create_shareable(page_);
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  ASSERT_EQ(api().memAddressReserve(&a, page_, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().memAddressReserve(&b, page_, 0, 0, 0), CUDA_SUCCESS);
  map_rw(a, h);
  const int fd = export_fd(h);
  ASSERT_GE(fd, 0);
  EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  const std::size_t before = device_bytes();
  CUmemGenericAllocationHandle imported = 0;
  ASSERT_EQ(ipc.import_handle(&imported, as_os_handle(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_SUCCESS);
  EXPECT_NE(imported, h);
  EXPECT_EQ(device_bytes(), before);  // the same physical memory, counted once
  EXPECT_EQ(::close(fd), 0);          // the caller's; the import keeps its own
  map_rw(b, imported);
  std::strcpy(reinterpret_cast<char*>(a), "written at a");
  EXPECT_STREQ(reinterpret_cast<const char*>(b), "written at a");
  std::strcpy(reinterpret_cast<char*>(b + 100), "written at b");
  EXPECT_STREQ(reinterpret_cast<const char*>(a + 100), "written at b");
  EXPECT_EQ(api().memUnmap(b, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(imported), CUDA_SUCCESS);
  EXPECT_EQ(device_bytes(), before);
  EXPECT_STREQ(reinterpret_cast<const char*>(a + 100), "written at b");
  EXPECT_EQ(api().memUnmap(a, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(device_bytes(), before - page_);
  EXPECT_EQ(api().memAddressFree(a, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(b, page_), CUDA_SUCCESS);
}

TEST_F(SimIpc, AShareableHandleMapsTheSameBytesInAnotherProcess) {
  CUmemGenericAllocationHandle h = create_shareable(page_);
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, page_, 0, 0, 0), CUDA_SUCCESS);
  map_rw(va, h);
  std::strcpy(reinterpret_cast<char*>(va), "from the parent");
  const int fd = export_fd(h);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(run_ipc_child("fd:" + std::to_string(page_), fd), 0);
  EXPECT_STREQ(reinterpret_cast<const char*>(va + 64), "from the child");
  EXPECT_EQ(::close(fd), 0);
  EXPECT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(va, page_), CUDA_SUCCESS);
}

TEST_F(SimIpc, ExportNeedsThePosixDescriptorTypeRequestedAtCreation) {
  const IpcApi& ipc = ipc_api();
  int supported = 0;
  ASSERT_EQ(api().deviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(supported, 1);
  int fd = -1;
  CUmemGenericAllocationHandle plain = create_page();  // requestedHandleTypes: none
  EXPECT_EQ(ipc.export_handle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_ERROR_INVALID_VALUE);
  CUmemAllocationProp prop{};
  ASSERT_EQ(ipc.properties(&prop, plain), CUDA_SUCCESS);
  EXPECT_EQ(prop.requestedHandleTypes, CU_MEM_HANDLE_TYPE_NONE);
  EXPECT_EQ(prop.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(prop.type, CU_MEM_ALLOCATION_TYPE_PINNED);
  EXPECT_EQ(api().memRelease(plain), CUDA_SUCCESS);

  CUmemGenericAllocationHandle shareable = create_shareable(page_);
  EXPECT_EQ(ipc.export_handle(&fd, shareable, CU_MEM_HANDLE_TYPE_WIN32, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ipc.export_handle(&fd, shareable, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ipc.export_handle(nullptr, shareable, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(api().memRelease(shareable), CUDA_SUCCESS);
  // Released, or never made.
  EXPECT_EQ(ipc.export_handle(&fd, shareable, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ipc.properties(&prop, shareable), CUDA_ERROR_INVALID_VALUE);
  // Only descriptors are shareable on the sim.
  for (const CUmemAllocationHandleType type :
       {CU_MEM_HANDLE_TYPE_WIN32, CU_MEM_HANDLE_TYPE_WIN32_KMT, CU_MEM_HANDLE_TYPE_FABRIC}) {
    prop = device_prop();
    prop.requestedHandleTypes = type;
    CUmemGenericAllocationHandle h = 0;
    EXPECT_EQ(api().memCreate(&h, page_, &prop, 0), CUDA_ERROR_NOT_SUPPORTED) << type;
  }
}

TEST_F(SimIpc, ImportingAnythingButTheSimsPhysicalMemoryIsRefused) {
  const IpcApi& ipc = ipc_api();
  CUmemGenericAllocationHandle h = 0;
  const auto posix = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  EXPECT_EQ(ipc.import_handle(&h, as_os_handle(-1), posix), CUDA_ERROR_INVALID_VALUE);
  const int closed = ::memfd_create("tidepool-sim-device-0", MFD_CLOEXEC);
  ASSERT_GE(closed, 0);
  ASSERT_EQ(::close(closed), 0);
  EXPECT_EQ(ipc.import_handle(&h, as_os_handle(closed), posix), CUDA_ERROR_INVALID_VALUE);
  const int file = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  EXPECT_EQ(ipc.import_handle(&h, as_os_handle(file), posix), CUDA_ERROR_INVALID_VALUE);
  ::close(file);
  // Some other memfd; a sim name but nothing in it; a device this process lacks.
  for (const char* name :
       {"someone-else", "tidepool-sim-device-01", "tidepool-sim-device-0", "tidepool-sim-device-64"}) {
    const int fd = ::memfd_create(name, MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    if (std::strcmp(name, "tidepool-sim-device-64") == 0) {
      ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(page_)), 0);
      EXPECT_EQ(ipc.import_handle(&h, as_os_handle(fd), posix), CUDA_ERROR_NOT_SUPPORTED) << name;
    } else {
      EXPECT_EQ(ipc.import_handle(&h, as_os_handle(fd), posix), CUDA_ERROR_INVALID_VALUE) << name;
    }
    ::close(fd);
  }
  // Handle types the sim has no way to carry.
  CUmemGenericAllocationHandle page = create_shareable(page_);
  const int fd = export_fd(page);
  EXPECT_EQ(ipc.import_handle(&h, as_os_handle(fd), CU_MEM_HANDLE_TYPE_FABRIC), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(ipc.import_handle(&h, as_os_handle(fd), CU_MEM_HANDLE_TYPE_NONE), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ipc.import_handle(nullptr, as_os_handle(fd), posix), CUDA_ERROR_INVALID_VALUE);
  ::close(fd);
  EXPECT_EQ(api().memRelease(page), CUDA_SUCCESS);
}

TEST_F(SimIpc, AnExportedPageOutlivesItsCreatorsReleaseAndItsFileIsNeverReused) {
  const IpcApi& ipc = ipc_api();
  // An odd size, so that any spare file this size would be this page's.
  const std::size_t size = 5 * page_;
  CUmemGenericAllocationHandle h = create_shareable(size);
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  ASSERT_EQ(api().memAddressReserve(&a, size, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().memAddressReserve(&b, size, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().memMap(a, size, 0, h, 0), CUDA_SUCCESS);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(api().memSetAccess(a, size, &access, 1), CUDA_SUCCESS);
  std::strcpy(reinterpret_cast<char*>(a), "the exporter's bytes");
  const int fd = export_fd(h);
  struct stat exported {};
  ASSERT_EQ(::fstat(fd, &exported), 0);
  CUmemGenericAllocationHandle imported = 0;
  ASSERT_EQ(ipc.import_handle(&imported, as_os_handle(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_SUCCESS);
  ASSERT_EQ(::close(fd), 0);
  ASSERT_EQ(api().memMap(b, size, 0, imported, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().memSetAccess(b, size, &access, 1), CUDA_SUCCESS);
  // The creator lets go of its page entirely.
  ASSERT_EQ(api().memUnmap(a, size), CUDA_SUCCESS);
  ASSERT_EQ(api().memRelease(h), CUDA_SUCCESS);
  EXPECT_STREQ(reinterpret_cast<const char*>(b), "the exporter's bytes");
  // New pages of the same size and place get files of their own.
  for (int i = 0; i < 3; ++i) {
    CUmemGenericAllocationHandle fresh = create_shareable(size);
    const int fresh_fd = export_fd(fresh);
    struct stat st {};
    ASSERT_EQ(::fstat(fresh_fd, &st), 0);
    EXPECT_NE(st.st_ino, exported.st_ino) << "a later cuMemCreate reused the exported page's file";
    ASSERT_EQ(api().memMap(a, size, 0, fresh, 0), CUDA_SUCCESS);
    ASSERT_EQ(api().memSetAccess(a, size, &access, 1), CUDA_SUCCESS);
    std::memset(reinterpret_cast<void*>(a), 'x', 64);
    EXPECT_STREQ(reinterpret_cast<const char*>(b), "the exporter's bytes");
    ASSERT_EQ(api().memUnmap(a, size), CUDA_SUCCESS);
    ASSERT_EQ(api().memRelease(fresh), CUDA_SUCCESS);
    ::close(fresh_fd);
  }
  EXPECT_EQ(api().memUnmap(b, size), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(imported), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(a, size), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(b, size), CUDA_SUCCESS);
}

// The importer learns where the memory lives from the memfd's name alone,
// and a spare file is reused only for memory of the place its name gives.
TEST_F(SimIpc, AnImportKnowsWhereTheMemoryLivesFromTheFilesName) {
  const IpcApi& ipc = ipc_api();
  int count = 0;
  ASSERT_EQ(api().deviceGetCount(&count), CUDA_SUCCESS);
  const std::size_t size = 3 * page_;
  // Device 0's file, released into the spares, then host and (with two
  // devices) device 1 memory of the same size.
  ASSERT_EQ(api().memRelease(create_shareable(size)), CUDA_SUCCESS);
  struct Case {
    CUmemLocationType type;
    int id;
  };
  std::vector<Case> cases{{CU_MEM_LOCATION_TYPE_HOST, 0}, {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
  if (count >= 2) cases.push_back({CU_MEM_LOCATION_TYPE_DEVICE, 1});
  for (const Case& c : cases) {
    CUmemGenericAllocationHandle h = create_shareable(size, c.type, c.id);
    const int fd = export_fd(h);
    CUmemGenericAllocationHandle imported = 0;
    ASSERT_EQ(ipc.import_handle(&imported, as_os_handle(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_SUCCESS);
    CUmemAllocationProp prop{};
    ASSERT_EQ(ipc.properties(&prop, imported), CUDA_SUCCESS);
    EXPECT_EQ(prop.location.type, c.type);
    EXPECT_EQ(prop.location.id, c.id);
    EXPECT_EQ(prop.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    EXPECT_EQ(api().memRelease(imported), CUDA_SUCCESS);
    EXPECT_EQ(api().memRelease(h), CUDA_SUCCESS);
    ::close(fd);
  }
}

TEST_F(SimIpc, LegacyIpcSharesCuMemAllocBytesWithAnotherProcessBothWays) {
  const IpcApi& ipc = ipc_api();
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, 10000), CUDA_SUCCESS);
  std::memset(reinterpret_cast<void*>(p), 0, 10000);
  std::strcpy(reinterpret_cast<char*>(p), "from the parent");
  CUipcMemHandle handle{};
  ASSERT_EQ(ipc.get(&handle, p), CUDA_SUCCESS);
  // Any address inside names the whole allocation.
  CUipcMemHandle inside{};
  ASSERT_EQ(ipc.get(&inside, p + 4321), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(&handle, &inside, sizeof handle), 0);
  // A handle of memory freed since, whose descriptor number a new
  // allocation has likely taken.
  CUdeviceptr freed = 0;
  ASSERT_EQ(api().memAlloc(&freed, 4096), CUDA_SUCCESS);
  CUipcMemHandle stale{};
  ASSERT_EQ(ipc.get(&stale, freed), CUDA_SUCCESS);
  ASSERT_EQ(api().memFree(freed), CUDA_SUCCESS);
  CUdeviceptr successor = 0;
  ASSERT_EQ(api().memAlloc(&successor, 4096), CUDA_SUCCESS);
  CUipcMemHandle renewed{};
  ASSERT_EQ(ipc.get(&renewed, successor), CUDA_SUCCESS);
  EXPECT_NE(std::memcmp(&stale, &renewed, sizeof stale), 0);  // a new allocation, a new handle

  EXPECT_EQ(run_ipc_child("legacy:" + to_hex(handle) + ":" + to_hex(stale)), 0);
  EXPECT_EQ(*reinterpret_cast<const int*>(p + 256), 42);  // the child's kernel
  for (int i = 0; i < 16; ++i) EXPECT_EQ(reinterpret_cast<const unsigned char*>(p + 512)[i], 7);
  EXPECT_STREQ(reinterpret_cast<const char*>(p + 1024), "from the child");
  EXPECT_EQ(api().memFree(successor), CUDA_SUCCESS);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
}

TEST_F(SimIpc, LegacyIpcIsRefusedOnVmmPoolAndHostMemory) {
  const IpcApi& ipc = ipc_api();
  CUipcMemHandle handle{};
  CUdeviceptr va = 0;
  ASSERT_EQ(api().memAddressReserve(&va, page_, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h = create_shareable(page_);
  map_rw(va, h);
  EXPECT_EQ(ipc.get(&handle, va), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().memUnmap(va, page_), CUDA_SUCCESS);
  EXPECT_EQ(api().memRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(api().memAddressFree(va, page_), CUDA_SUCCESS);

  CUstream stream = nullptr;
  ASSERT_EQ(api().streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr pooled = 0;
  ASSERT_EQ(api().memAllocAsync(&pooled, 4096, stream), CUDA_SUCCESS);
  EXPECT_EQ(ipc.get(&handle, pooled), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().memFreeAsync(pooled, stream), CUDA_SUCCESS);
  EXPECT_EQ(api().streamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().streamDestroy(stream), CUDA_SUCCESS);

  void* host = nullptr;
  ASSERT_EQ(api().memAllocHost(&host, 4096), CUDA_SUCCESS);
  EXPECT_EQ(ipc.get(&handle, reinterpret_cast<CUdeviceptr>(host)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().memFreeHost(host), CUDA_SUCCESS);
  int pageable = 0;
  EXPECT_EQ(ipc.get(&handle, reinterpret_cast<CUdeviceptr>(&pageable)), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, 4096), CUDA_SUCCESS);
  EXPECT_EQ(ipc.get(nullptr, p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
}

TEST_F(SimIpc, ALegacyHandleOpensOnlyInAnotherProcess) {
  const IpcApi& ipc = ipc_api();
  CUdeviceptr p = 0;
  ASSERT_EQ(api().memAlloc(&p, 4096), CUDA_SUCCESS);
  CUipcMemHandle handle{};
  ASSERT_EQ(ipc.get(&handle, p), CUDA_SUCCESS);
  CUdeviceptr opened = 0;
  // As the driver: "invalid device context" in the exporting process.
  EXPECT_EQ(ipc.open(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(ipc.open_v1(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(ipc.open(&opened, CUipcMemHandle{}, 0), CUDA_ERROR_INVALID_VALUE);  // not a handle
  EXPECT_EQ(ipc.open(&opened, handle, 2), CUDA_ERROR_INVALID_VALUE);            // unknown flag
  EXPECT_EQ(ipc.open(nullptr, handle, 0), CUDA_ERROR_INVALID_VALUE);
  // Nothing opened to close.
  EXPECT_EQ(ipc.close(p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ipc.close(0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().memFree(p), CUDA_SUCCESS);
  // Interprocess events are not simulated, and the device says so.
  CUipcEventHandle event_handle{};
  CUevent event = nullptr;
  EXPECT_EQ(ipc.get_event(&event_handle, nullptr), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(ipc.open_event(&event, event_handle), CUDA_ERROR_NOT_SUPPORTED);
  int supported = 1;
  ASSERT_EQ(api().deviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, 0), CUDA_SUCCESS);
  EXPECT_EQ(supported, 0);
  // Without a current context.
  ASSERT_EQ(api().ctxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(ipc.get(&handle, p), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(ipc.open(&opened, handle, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(ipc.close(p), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(api().ctxSetCurrent(context_), CUDA_SUCCESS);
}

// What cuGetProcAddress hands out for `name` at `version`, and the sim's own export of `symbol`.
void* resolved_at(const char* name, int version) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found{};
  EXPECT_EQ(sim_driver().api().getProcAddress(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found), CUDA_SUCCESS)
      << name;
  return fn;
}
void* exported_symbol(const char* symbol) { return ::dlsym(sim_driver().handle(), symbol); }

TEST_F(SimIpc, GetProcAddressHandsOutTheSharingEntryPointsByVersion) {
  const auto resolve = resolved_at;
  const auto exported = exported_symbol;
  EXPECT_EQ(resolve("cuIpcOpenMemHandle", 10000), exported("cuIpcOpenMemHandle"));
  EXPECT_EQ(resolve("cuIpcOpenMemHandle", 11000), exported("cuIpcOpenMemHandle_v2"));
  EXPECT_EQ(resolve("cuIpcGetMemHandle", 12000), exported("cuIpcGetMemHandle"));
  EXPECT_EQ(resolve("cuIpcCloseMemHandle", 12000), exported("cuIpcCloseMemHandle"));
  EXPECT_EQ(resolve("cuIpcGetEventHandle", 12000), exported("cuIpcGetEventHandle"));
  EXPECT_EQ(resolve("cuIpcOpenEventHandle", 12000), exported("cuIpcOpenEventHandle"));
  EXPECT_EQ(resolve("cuMemExportToShareableHandle", 12000), exported("cuMemExportToShareableHandle"));
  EXPECT_EQ(resolve("cuMemImportFromShareableHandle", 12000), exported("cuMemImportFromShareableHandle"));
  EXPECT_EQ(resolve("cuMemGetAllocationPropertiesFromHandle", 12000),
            exported("cuMemGetAllocationPropertiesFromHandle"));
}

// --- fault injection reaches every entry point ---------------------------------------------------------

// The driver symbols (cu*) the sim library defines and exports, read from
// its dynamic symbol table.
std::vector<std::string> exported_driver_symbols() {
  std::ifstream file(TIDEPOOL_SIM_LIBRARY, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  Elf64_Ehdr header{};
  if (bytes.size() < sizeof header) return out;
  std::memcpy(&header, bytes.data(), sizeof header);
  auto section = [&](std::size_t i) {
    Elf64_Shdr s{};
    std::memcpy(&s, bytes.data() + header.e_shoff + i * sizeof(Elf64_Shdr), sizeof s);
    return s;
  };
  for (std::size_t i = 0; i < header.e_shnum; ++i) {
    const Elf64_Shdr dynsym = section(i);
    if (dynsym.sh_type != SHT_DYNSYM) continue;
    const Elf64_Shdr strings = section(dynsym.sh_link);
    for (std::size_t k = 0; k < dynsym.sh_size / sizeof(Elf64_Sym); ++k) {
      Elf64_Sym sym{};
      std::memcpy(&sym, bytes.data() + dynsym.sh_offset + k * sizeof sym, sizeof sym);
      const int bind = ELF64_ST_BIND(sym.st_info);
      if (sym.st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK)) continue;
      std::string name(bytes.data() + strings.sh_offset + sym.st_name);
      if (name.rfind("cu", 0) == 0) out.push_back(name);
    }
  }
  return out;
}

TEST_F(Sim, InjectedFaultIsReturnedByTheNextCallOfEveryExportedEntryPoint) {
  auto inject = sim_control<void (*)(const char*, unsigned, CUresult)>("tidepool_sim_inject_fault");
  constexpr CUresult kFault = CUDA_ERROR_ECC_UNCORRECTABLE;
  // Arguments are chosen so that a call the fault misses does no harm.
  const CUstream bogus = reinterpret_cast<CUstream>(std::uintptr_t{0x10});
  int i = 0;
  unsigned u = 0;
  char name[64];
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUgreenCtx green = nullptr;
  CUmemoryPool mempool = nullptr;
  CUdeviceptr dptr = 0;
  std::size_t size = 0;
  std::size_t size2 = 0;
  void* host = nullptr;
  void* fn = nullptr;
  const char* text = nullptr;
  CUmemGenericAllocationHandle handle = 0;
  CUmemAllocationProp prop = device_prop();
  CUstream stream = nullptr;
  CUstreamCaptureStatus status{};
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  const CUgraphNode* deps = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  float ms = 0;
  const CUcontext context = context_;
#define TIDEPOOL_FAULT_CASE(symbol, ...)                                      \
  {                                                                           \
#symbol, [&] { return entry<decltype(&::symbol)>(#symbol)(__VA_ARGS__); } \
  }
#define TIDEPOOL_FAULT_CASE_T(symbol, type, ...)             \
  {                                                          \
    symbol, [&] { return entry<type>(symbol)(__VA_ARGS__); } \
  }
  const std::vector<std::pair<std::string, std::function<CUresult()>>> cases = {
      TIDEPOOL_FAULT_CASE(cuInit, 0),
      TIDEPOOL_FAULT_CASE(cuDriverGetVersion, &i),
      TIDEPOOL_FAULT_CASE(cuDeviceGet, &dev, 0),
      TIDEPOOL_FAULT_CASE(cuDeviceGetCount, &i),
      TIDEPOOL_FAULT_CASE(cuDeviceGetName, name, static_cast<int>(sizeof name), 0),
      TIDEPOOL_FAULT_CASE(cuDeviceGetAttribute, &i, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
      TIDEPOOL_FAULT_CASE(cuDeviceTotalMem_v2, &size, 0),
      TIDEPOOL_FAULT_CASE(cuDevicePrimaryCtxRetain, &ctx, -1),
      TIDEPOOL_FAULT_CASE(cuDevicePrimaryCtxRelease_v2, -1),
      TIDEPOOL_FAULT_CASE(cuDevicePrimaryCtxGetState, 0, &u, &i),
      TIDEPOOL_FAULT_CASE(cuCtxGetCurrent, &ctx),
      TIDEPOOL_FAULT_CASE(cuCtxSetCurrent, context),
      TIDEPOOL_FAULT_CASE(cuCtxPushCurrent_v2, context),
      TIDEPOOL_FAULT_CASE(cuCtxPopCurrent_v2, &ctx),
      TIDEPOOL_FAULT_CASE_T("cuCtxCreate_v2", CtxCreateV2, nullptr, 0, 0),
      TIDEPOOL_FAULT_CASE_T("cuCtxCreate_v3", CtxCreateV3, nullptr, nullptr, 0, 0, 0),
      TIDEPOOL_FAULT_CASE(cuCtxCreate_v4, nullptr, nullptr, 0, 0),
      TIDEPOOL_FAULT_CASE(cuCtxDestroy_v2, nullptr),
      TIDEPOOL_FAULT_CASE(cuCtxEnablePeerAccess, context, 0),
      TIDEPOOL_FAULT_CASE(cuCtxDisablePeerAccess, context),
      TIDEPOOL_FAULT_CASE(cuDeviceCanAccessPeer, &i, 0, 0),
      TIDEPOOL_FAULT_CASE(cuDeviceGetDefaultMemPool, &mempool, 0),
      TIDEPOOL_FAULT_CASE(cuDeviceGetMemPool, &mempool, 0),
      TIDEPOOL_FAULT_CASE(cuDeviceSetMemPool, 0, nullptr),
      TIDEPOOL_FAULT_CASE(cuMemPoolCreate, &mempool, nullptr),
      TIDEPOOL_FAULT_CASE(cuMemPoolDestroy, nullptr),
      TIDEPOOL_FAULT_CASE(cuMemPoolSetAccess, nullptr, nullptr, 0),
      TIDEPOOL_FAULT_CASE(cuMemAllocFromPoolAsync, &dptr, 0, reinterpret_cast<CUmemoryPool>(std::uintptr_t{0x10}),
                          bogus),
      TIDEPOOL_FAULT_CASE(cuCtxGetDevice, &dev),
      TIDEPOOL_FAULT_CASE(cuCtxGetDevice_v2, &dev, context),
      TIDEPOOL_FAULT_CASE(cuCtxSynchronize),
      TIDEPOOL_FAULT_CASE(cuCtxSynchronize_v2, context),
      TIDEPOOL_FAULT_CASE(cuMemAlloc_v2, &dptr, 0),
      TIDEPOOL_FAULT_CASE(cuMemFree_v2, 0),
      TIDEPOOL_FAULT_CASE(cuMemAllocPitch_v2, &dptr, &size, 0, 0, 4),
      TIDEPOOL_FAULT_CASE(cuMemGetInfo_v2, &size, &size2),
      TIDEPOOL_FAULT_CASE(cuMemGetAddressRange_v2, &dptr, &size, 0),
      TIDEPOOL_FAULT_CASE(cuMemAllocAsync, &dptr, 0, bogus),
      TIDEPOOL_FAULT_CASE_T("cuMemAllocAsync_ptsz", AllocAsync, &dptr, 0, bogus),
      TIDEPOOL_FAULT_CASE(cuMemFreeAsync, 0, bogus),
      TIDEPOOL_FAULT_CASE_T("cuMemFreeAsync_ptsz", FreeAsync, 0, bogus),
      TIDEPOOL_FAULT_CASE(cuMemAllocHost_v2, &host, 0),
      TIDEPOOL_FAULT_CASE(cuMemHostAlloc, &host, 0, 0),
      TIDEPOOL_FAULT_CASE(cuMemFreeHost, nullptr),
      TIDEPOOL_FAULT_CASE(cuMemHostGetDevicePointer_v2, &dptr, nullptr, 0),
      TIDEPOOL_FAULT_CASE(cuMemAddressReserve, &dptr, 0, 0, 0, 0),
      TIDEPOOL_FAULT_CASE(cuMemAddressFree, 0, 0),
      TIDEPOOL_FAULT_CASE(cuMemCreate, &handle, 0, &prop, 0),
      TIDEPOOL_FAULT_CASE(cuMemRelease, 0),
      TIDEPOOL_FAULT_CASE(cuMemMap, 0, 0, 0, 0, 0),
      TIDEPOOL_FAULT_CASE(cuMemUnmap, 0, 0),
      TIDEPOOL_FAULT_CASE(cuMemSetAccess, 0, 0, nullptr, 0),
      TIDEPOOL_FAULT_CASE(cuMemGetAllocationGranularity, &size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
      TIDEPOOL_FAULT_CASE(cuMemExportToShareableHandle, nullptr, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
      TIDEPOOL_FAULT_CASE(cuMemImportFromShareableHandle, nullptr, nullptr, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
      TIDEPOOL_FAULT_CASE(cuMemGetAllocationPropertiesFromHandle, nullptr, 0),
      TIDEPOOL_FAULT_CASE(cuIpcGetMemHandle, nullptr, 0),
      TIDEPOOL_FAULT_CASE(cuIpcOpenMemHandle_v2, &dptr, CUipcMemHandle{}, 0),
      TIDEPOOL_FAULT_CASE_T("cuIpcOpenMemHandle", IpcOpenMemHandleV1, &dptr, CUipcMemHandle{}, 0),
      TIDEPOOL_FAULT_CASE(cuIpcCloseMemHandle, 0),
      TIDEPOOL_FAULT_CASE(cuIpcGetEventHandle, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuIpcOpenEventHandle, nullptr, CUipcEventHandle{}),
      TIDEPOOL_FAULT_CASE(cuStreamCreate, &stream, 0xFFu),
      TIDEPOOL_FAULT_CASE(cuStreamCreateWithPriority, &stream, 0xFFu, 0),
      TIDEPOOL_FAULT_CASE(cuStreamDestroy_v2, bogus),
      TIDEPOOL_FAULT_CASE(cuStreamSynchronize, bogus),
      TIDEPOOL_FAULT_CASE(cuStreamQuery, bogus),
      TIDEPOOL_FAULT_CASE(cuStreamWaitEvent, bogus, nullptr, 0),
      TIDEPOOL_FAULT_CASE(cuStreamIsCapturing, bogus, &status),
      TIDEPOOL_FAULT_CASE(cuStreamGetFlags, bogus, &u),
      TIDEPOOL_FAULT_CASE(cuStreamGetCtx, bogus, &ctx),
      TIDEPOOL_FAULT_CASE(cuStreamGetCtx_v2, bogus, &ctx, &green),
      TIDEPOOL_FAULT_CASE_T("cuStreamBeginCapture", BeginCaptureV1, bogus),
      TIDEPOOL_FAULT_CASE(cuStreamBeginCapture_v2, bogus, CU_STREAM_CAPTURE_MODE_GLOBAL),
      TIDEPOOL_FAULT_CASE_T("cuStreamBeginCapture_ptsz", BeginCaptureV1, bogus),
      TIDEPOOL_FAULT_CASE_T("cuStreamBeginCapture_v2_ptsz", BeginCapturePtsz, bogus, CU_STREAM_CAPTURE_MODE_GLOBAL),
      TIDEPOOL_FAULT_CASE(cuStreamBeginCaptureToGraph, bogus, graph, nullptr, nullptr, 0,
                          CU_STREAM_CAPTURE_MODE_GLOBAL),
      TIDEPOOL_FAULT_CASE_T("cuStreamBeginCaptureToGraph_ptsz", BeginCaptureToGraphPtsz, bogus, graph, nullptr, nullptr,
                            0, CU_STREAM_CAPTURE_MODE_GLOBAL),
      TIDEPOOL_FAULT_CASE(cuStreamEndCapture, bogus, &graph),
      TIDEPOOL_FAULT_CASE_T("cuStreamEndCapture_ptsz", EndCapturePtsz, bogus, &graph),
      TIDEPOOL_FAULT_CASE(cuGraphCreate, nullptr, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamGetCaptureInfo", CaptureInfoV1, bogus, &status, &id),
      TIDEPOOL_FAULT_CASE_T("cuStreamGetCaptureInfo_v2", CaptureInfoV2, bogus, &status, &id, &graph, &deps, &size),
      TIDEPOOL_FAULT_CASE(cuStreamGetCaptureInfo_v3, bogus, &status, &id, &graph, &deps, &edges, &size),
      TIDEPOOL_FAULT_CASE(cuThreadExchangeStreamCaptureMode, nullptr),
      TIDEPOOL_FAULT_CASE(cuGraphDestroy, nullptr),
      TIDEPOOL_FAULT_CASE(cuGraphInstantiateWithFlags, nullptr, nullptr, 0),
      TIDEPOOL_FAULT_CASE(cuGraphLaunch, nullptr, bogus),
      TIDEPOOL_FAULT_CASE_T("cuGraphLaunch_ptsz", GraphLaunchPtsz, nullptr, bogus),
      TIDEPOOL_FAULT_CASE(cuGraphExecDestroy, nullptr),
      TIDEPOOL_FAULT_CASE(cuGraphGetNodes, nullptr, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuGraphNodeGetType, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuGraphKernelNodeGetParams_v2, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuGraphMemcpyNodeGetParams, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuGraphMemsetNodeGetParams, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuGraphAddChildGraphNode, nullptr, nullptr, nullptr, 0, nullptr),
      TIDEPOOL_FAULT_CASE(cuGraphChildGraphNodeGetGraph, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuLaunchHostFunc, bogus, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuEventCreate, nullptr, 0),
      TIDEPOOL_FAULT_CASE(cuEventDestroy_v2, nullptr),
      TIDEPOOL_FAULT_CASE(cuEventRecord, nullptr, bogus),
      TIDEPOOL_FAULT_CASE(cuEventQuery, nullptr),
      TIDEPOOL_FAULT_CASE(cuEventSynchronize, nullptr),
      TIDEPOOL_FAULT_CASE_T("cuEventElapsedTime", ElapsedTimeV1, &ms, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuEventElapsedTime_v2, &ms, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuFuncGetParamInfo, nullptr, 0, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuKernelGetParamInfo, nullptr, 0, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuModuleLoadData, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuModuleGetFunction, nullptr, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuModuleUnload, nullptr),
      TIDEPOOL_FAULT_CASE(cuLaunchKernel, nullptr, 1, 1, 1, 1, 1, 1, 0, bogus, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE_T("cuLaunchKernel_ptsz", LaunchKernelPtsz, nullptr, 1, 1, 1, 1, 1, 1, 0, bogus, nullptr,
                            nullptr),
      TIDEPOOL_FAULT_CASE(cuLaunchKernelEx, nullptr, nullptr, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE_T("cuLaunchKernelEx_ptsz", LaunchKernelExPtsz, nullptr, nullptr, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuStreamWaitValue32_v2, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamWaitValue32_v2_ptsz", WaitValue32Ptsz, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE(cuStreamWaitValue64_v2, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamWaitValue64_v2_ptsz", WaitValue64Ptsz, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE(cuStreamWriteValue32_v2, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamWriteValue32_v2_ptsz", WriteValue32Ptsz, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE(cuStreamWriteValue64_v2, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamWriteValue64_v2_ptsz", WriteValue64Ptsz, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE(cuStreamBatchMemOp_v2, bogus, 0, nullptr, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamBatchMemOp_v2_ptsz", BatchMemOpPtsz, bogus, 0, nullptr, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamWaitValue32", WaitValue32Ptsz, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamWaitValue32_ptsz", WaitValue32Ptsz, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamWaitValue64", WaitValue64Ptsz, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamWaitValue64_ptsz", WaitValue64Ptsz, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamWriteValue32", WriteValue32Ptsz, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamWriteValue32_ptsz", WriteValue32Ptsz, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamWriteValue64", WriteValue64Ptsz, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamWriteValue64_ptsz", WriteValue64Ptsz, bogus, 0, 0, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamBatchMemOp", BatchMemOpPtsz, bogus, 0, nullptr, 0),
      TIDEPOOL_FAULT_CASE_T("cuStreamBatchMemOp_ptsz", BatchMemOpPtsz, bogus, 0, nullptr, 0),
      TIDEPOOL_FAULT_CASE(cuMemcpyBatchAsync_v2, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0, bogus),
      TIDEPOOL_FAULT_CASE_T("cuMemcpyBatchAsync_v2_ptsz", CopyBatchPtsz, nullptr, nullptr, nullptr, 0, nullptr, nullptr,
                            0, bogus),
      TIDEPOOL_FAULT_CASE_T("cuMemcpyBatchAsync", CopyBatchV1, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0,
                            nullptr, bogus),
      TIDEPOOL_FAULT_CASE_T("cuMemcpyBatchAsync_ptsz", CopyBatchV1, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0,
                            nullptr, bogus),
      TIDEPOOL_FAULT_CASE(cuMemcpy3DBatchAsync_v2, 0, nullptr, 0, bogus),
      TIDEPOOL_FAULT_CASE_T("cuMemcpy3DBatchAsync_v2_ptsz", Copy3DBatchPtsz, 0, nullptr, 0, bogus),
      TIDEPOOL_FAULT_CASE_T("cuMemcpy3DBatchAsync", Copy3DBatchV1, 0, nullptr, nullptr, 0, bogus),
      TIDEPOOL_FAULT_CASE_T("cuMemcpy3DBatchAsync_ptsz", Copy3DBatchV1, 0, nullptr, nullptr, 0, bogus),
      TIDEPOOL_FAULT_CASE(cuArrayCreate_v2, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuArrayDestroy, nullptr),
      TIDEPOOL_FAULT_CASE(cuArrayGetDescriptor_v2, nullptr, nullptr),
      TIDEPOOL_FAULT_CASE(cuMemcpyDtoA_v2, nullptr, 0, 0, 0),
      TIDEPOOL_FAULT_CASE(cuMemcpyAtoD_v2, 0, nullptr, 0, 0),
      TIDEPOOL_FAULT_CASE(cuMemcpyHtoA_v2, nullptr, 0, nullptr, 0),
      TIDEPOOL_FAULT_CASE(cuMemcpyAtoH_v2, nullptr, nullptr, 0, 0),
      TIDEPOOL_FAULT_CASE(cuMemcpy, 0, 0, 0),
      TIDEPOOL_FAULT_CASE(cuMemcpyAsync, 0, 0, 0, bogus),
      TIDEPOOL_FAULT_CASE(cuMemcpyHtoD_v2, 0, nullptr, 0),
      TIDEPOOL_FAULT_CASE(cuMemcpyDtoH_v2, nullptr, 0, 0),
      TIDEPOOL_FAULT_CASE(cuMemcpyDtoD_v2, 0, 0, 0),
      TIDEPOOL_FAULT_CASE(cuMemcpyHtoDAsync_v2, 0, nullptr, 0, bogus),
      TIDEPOOL_FAULT_CASE(cuMemcpyDtoHAsync_v2, nullptr, 0, 0, bogus),
      TIDEPOOL_FAULT_CASE(cuMemcpyDtoDAsync_v2, 0, 0, 0, bogus),
      TIDEPOOL_FAULT_CASE(cuMemsetD8_v2, 0, 0, 0),
      TIDEPOOL_FAULT_CASE(cuMemsetD8Async, 0, 0, 0, bogus),
      TIDEPOOL_FAULT_CASE(cuPointerGetAttribute, nullptr, CU_POINTER_ATTRIBUTE_CONTEXT, 0),
      TIDEPOOL_FAULT_CASE(cuPointerGetAttributes, 0, nullptr, nullptr, 0),
      TIDEPOOL_FAULT_CASE(cuGetErrorName, CUDA_SUCCESS, &text),
      TIDEPOOL_FAULT_CASE(cuGetErrorString, CUDA_SUCCESS, &text),
      TIDEPOOL_FAULT_CASE_T("cuGetProcAddress", GetProcAddressV1, "cuInit", &fn, 12000, 0),
      TIDEPOOL_FAULT_CASE(cuGetProcAddress_v2, "cuInit", &fn, 12000, 0, nullptr),
  };
#undef TIDEPOOL_FAULT_CASE
#undef TIDEPOOL_FAULT_CASE_T
  std::set<std::string> covered;
  for (const auto& [symbol, call] : cases) {
    covered.insert(symbol);
    inject(symbol.c_str(), 1, kFault);
    EXPECT_EQ(call(), kFault) << symbol << " ignores a fault injected under its exported name";
  }
  ASSERT_EQ(api().ctxSetCurrent(context_), CUDA_SUCCESS);  // should a missed fault have changed it
  // Every exported driver entry point is in the list above.
  const std::vector<std::string> exported = exported_driver_symbols();
  EXPECT_GT(exported.size(), 50u);
  for (const std::string& symbol : exported) EXPECT_EQ(covered.count(symbol), 1u) << symbol << " is not covered";
}

TEST_F(Sim, GetProcAddressResolvesContextAndCaptureEntryPointsByVersion) {
  const auto resolve = resolved_at;
  const auto exported = exported_symbol;
  EXPECT_EQ(resolve("cuStreamGetFlags", 12000), exported("cuStreamGetFlags"));
  EXPECT_EQ(resolve("cuStreamGetCtx", 12000), exported("cuStreamGetCtx"));
  EXPECT_EQ(resolve("cuStreamGetCtx", 12050), exported("cuStreamGetCtx_v2"));
  EXPECT_EQ(resolve("cuStreamBeginCapture", 10000), exported("cuStreamBeginCapture"));
  EXPECT_EQ(resolve("cuStreamBeginCapture", 12000), exported("cuStreamBeginCapture_v2"));
  void* per_thread = nullptr;
  ASSERT_EQ(api().getProcAddress("cuStreamBeginCapture", &per_thread, 12000,
                                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(per_thread, exported("cuStreamBeginCapture_v2_ptsz"));
  EXPECT_EQ(resolve("cuStreamEndCapture", 12000), exported("cuStreamEndCapture"));
  EXPECT_EQ(resolve("cuStreamBeginCaptureToGraph", 12030), exported("cuStreamBeginCaptureToGraph"));
  EXPECT_EQ(resolve("cuGraphCreate", 12000), exported("cuGraphCreate"));
  EXPECT_EQ(resolve("cuCtxCreate", 11000), exported("cuCtxCreate_v2"));
  EXPECT_EQ(resolve("cuCtxCreate", 12000), exported("cuCtxCreate_v3"));
  EXPECT_EQ(resolve("cuCtxCreate", 13000), exported("cuCtxCreate_v4"));
  EXPECT_EQ(resolve("cuCtxDestroy", 12000), exported("cuCtxDestroy_v2"));
  // Stream memory operations: the v1 ABI before CUDA 11.7, the _v2 from it.
  for (const char* name : {"cuStreamWaitValue32", "cuStreamWaitValue64", "cuStreamWriteValue32", "cuStreamWriteValue64",
                           "cuStreamBatchMemOp"}) {
    EXPECT_EQ(resolve(name, 11060), exported(name)) << name;
    EXPECT_EQ(resolve(name, 11070), exported((std::string(name) + "_v2").c_str())) << name;
    ASSERT_EQ(api().getProcAddress(name, &per_thread, 11060, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr),
              CUDA_SUCCESS);
    EXPECT_EQ(per_thread, exported((std::string(name) + "_ptsz").c_str())) << name;
  }
  for (const char* name : {"cuStreamBeginCaptureToGraph", "cuStreamEndCapture"}) {
    ASSERT_EQ(api().getProcAddress(name, &per_thread, 12030, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr),
              CUDA_SUCCESS);
    EXPECT_EQ(per_thread, exported((std::string(name) + "_ptsz").c_str())) << name;
  }
  EXPECT_EQ(resolve("cuStreamGetCaptureInfo", 11000), exported("cuStreamGetCaptureInfo"));
  EXPECT_EQ(resolve("cuStreamGetCaptureInfo", 12000), exported("cuStreamGetCaptureInfo_v2"));
  EXPECT_EQ(resolve("cuStreamGetCaptureInfo", 13000), exported("cuStreamGetCaptureInfo_v3"));
  EXPECT_EQ(resolve("cuThreadExchangeStreamCaptureMode", 12000), exported("cuThreadExchangeStreamCaptureMode"));
  EXPECT_EQ(resolve("cuGraphDestroy", 12000), exported("cuGraphDestroy"));
  EXPECT_EQ(resolve("cuEventElapsedTime", 12000), exported("cuEventElapsedTime"));
  EXPECT_EQ(resolve("cuEventElapsedTime", 12080), exported("cuEventElapsedTime_v2"));
}

// --- exit ------------------------------------------------------------------------------------------------

// The child of ExitWhileAWorkerWaitsOnAnotherStreamIsClean: this binary run
// again with TIDEPOOL_SIM_EXIT_CHILD set does this before main, and exits.
[[maybe_unused]] const bool kExitChild = [] {
  if (std::getenv("TIDEPOOL_SIM_EXIT_CHILD") == nullptr) return false;
  alarm(10);  // a hang at exit dies of SIGALRM
  const driver::Api& api = sim_driver().api();
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream waiting = nullptr;
  CUstream blocked = nullptr;
  CUevent event = nullptr;
  // Never opened, and leaked: the blocked worker waits on it through exit.
  Gate& never = *new Gate;
  static int cell = 0;
  if (api.init(0) != CUDA_SUCCESS || api.deviceGet(&device, 0) != CUDA_SUCCESS ||
      api.devicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS || api.ctxSetCurrent(context) != CUDA_SUCCESS ||
      api.streamCreate(&waiting, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      api.streamCreate(&blocked, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      api.eventCreate(&event, 0) != CUDA_SUCCESS || launch_gated_write(blocked, &never, &cell, 1) != CUDA_SUCCESS ||
      api.eventRecord(event, blocked) != CUDA_SUCCESS || api.streamWaitEvent(waiting, event, 0) != CUDA_SUCCESS) {
    _exit(3);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the waiting worker is now asleep in the sim
  std::exit(0);                                                // static destructors run while both workers still wait
}();

TEST_F(Sim, ExitWhileAWorkerWaitsOnAnotherStreamIsClean) {
  std::vector<std::string> env_strings{"TIDEPOOL_SIM_EXIT_CHILD=1"};
  for (char** e = ::environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe";
  char* argv[] = {self.data(), nullptr};
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
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
#define TIDEPOOL_EXPECT_ENTRY(field, name, symbol, abi_version) \
  EXPECT_NE(reinterpret_cast<void*>(api.field), nullptr) << name;
  TIDEPOOL_DRIVER_ENTRY_POINTS(TIDEPOOL_EXPECT_ENTRY)
#undef TIDEPOOL_EXPECT_ENTRY
}

// cuGetProcAddress hands out the newest variant at or below the version asked
// for, and CUDA 13.0 changed cuCtxGetDevice's and cuCtxSynchronize's
// signatures (as the sim does, like the real driver): every field must hold
// the very variant whose type it is called through, the exported ABI symbol.
TEST(Driver, EveryTableEntryIsTheVariantItsTypeNames) {
  const driver::Driver& d = sim_driver();
  ASSERT_GE(d.version(), 13000);
  const driver::Api& api = d.api();
#define TIDEPOOL_EXPECT_VARIANT(field, name, symbol, abi_version) \
  EXPECT_EQ(reinterpret_cast<void*>(api.field), ::dlsym(d.handle(), #symbol)) << name << " as " << #symbol;
  TIDEPOOL_DRIVER_ENTRY_POINTS(TIDEPOOL_EXPECT_VARIANT)
#undef TIDEPOOL_EXPECT_VARIANT
}

TEST(Driver, TheSimHandsOutCuda13ContextVariantsLikeTheDriver) {
  const driver::Driver& d = sim_driver();
  auto* resolve = d.api().getProcAddress;
  ASSERT_NE(resolve, nullptr);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found{};
  ASSERT_EQ(resolve("cuCtxGetDevice", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &found), CUDA_SUCCESS);
  EXPECT_EQ(fn, ::dlsym(d.handle(), "cuCtxGetDevice_v2"));
  ASSERT_EQ(resolve("cuCtxGetDevice", &fn, 12090, CU_GET_PROC_ADDRESS_DEFAULT, &found), CUDA_SUCCESS);
  EXPECT_EQ(fn, ::dlsym(d.handle(), "cuCtxGetDevice"));
  ASSERT_EQ(resolve("cuCtxSynchronize", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &found), CUDA_SUCCESS);
  EXPECT_EQ(fn, ::dlsym(d.handle(), "cuCtxSynchronize_v2"));
  // The 13.0 forms name their context; null is the current one.
  auto* get_device = reinterpret_cast<decltype(&::cuCtxGetDevice_v2)>(::dlsym(d.handle(), "cuCtxGetDevice_v2"));
  ASSERT_EQ(d.api().init(0), CUDA_SUCCESS);
  CUcontext primary = nullptr;
  ASSERT_EQ(d.api().devicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  CUdevice device = -1;
  EXPECT_EQ(get_device(&device, primary), CUDA_SUCCESS);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(d.api().devicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(get_device(&device, reinterpret_cast<CUcontext>(&device)), CUDA_ERROR_INVALID_CONTEXT);
}

}  // namespace
}  // namespace tidepool
