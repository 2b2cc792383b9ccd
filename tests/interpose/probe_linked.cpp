// A program linked the ordinary way against libcuda.so.1 and a shared cudart
// (here the sim and the test cudart), for the preload tests. Each mode uses
// one route into the allocator and checks what it can see from inside;
// the test around it checks the report and the exit status.
//   runtime  the cudaMalloc family
//   driver   the driver exports, foreign pointers and stream capture
//   threads  several threads allocating on streams of their own
//   fork     allocations on both sides of a fork
//   fork_alloc  a child forked while the parent's pool has work in flight
//            and a block freed stream-ordered behind it (run under a
//            budget): the child allocates and frees, which must get the
//            driver's own answers and never hang; the parent goes on
//   sidestream  cuMemFree while a slow kernel on a non-blocking stream (live,
//            or destroyed) still writes the block; run under a tight budget
//            so that reuse of the freed pages is forced; the new owners
//            write from the host
//   sidestream_ordered  the same, the new owners writing with cuMemsetD8
//   evict    live data four times the budget (run with device_limit:16MiB,
//            evict:on), written and checked by kernels touching every block
//            in random order, with cuMemFree and stream-ordered frees
//            beside them; the sim's device bytes are watched all along
//   idle_stream_pairs  a non-blocking stream that set one block, then left
//            idle while 400 cached cudaFree-style pairs of five sizes go by
//            with no work between them (each barrier after the first
//            stands on its event: the test reads the report)
//   idle_stream_pairs_with_work  the same, each new block set on the legacy
//            stream before its free, and the stream setting the last one:
//            every byte checked; _with_blocking_work and
//            _with_per_thread_work set them on a blocking stream, and on
//            the per-thread default stream
//   mempool  a memory pool of the program's own made the device's current
//            pool: cuMemAllocAsync takes from it (the pointer attribute
//            names it) until the pool is destroyed, and
//            cuMemAllocFromPoolAsync always does; their frees work, and
//            kernels read and write every block
//   foreign  8 MiB cuMemAlloc blocks until one fails (at most 10), all
//            freed; then 40 MiB made with cuMemCreate, mapped, and its
//            handle released at once, as NCCL and CUDA's samples do (the
//            driver holds it until the unmap); the blocks again, and once
//            more after the unmap: under device_limit:64MiB the pool holds
//            what the budget leaves
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "probe_linked_common.hpp"
#include "sim/sim_control.h"

extern "C" std::uint64_t mini_cudart_calls(const char* name);

namespace {

using probe::fill;
using probe::holds;
using probe::make_context_current;
using probe::register_word_kernels;
using probe::word_pattern;

constexpr std::size_t MiB = std::size_t{1} << 20;

int runtime_route() {
  PROBE_CHECK(cudaFree(nullptr) == cudaSuccess);  // context initialisation, as ever
  std::vector<void*> blocks;
  const std::size_t sizes[] = {256, 4096, 3 * MiB, 512 * 1024, 17 * MiB + 5};
  unsigned seed = 1;
  for (std::size_t size : sizes) {
    void* p = nullptr;
    PROBE_CHECK(cudaMalloc(&p, size) == cudaSuccess && p != nullptr);
    if (p == nullptr) continue;
    fill(reinterpret_cast<std::uintptr_t>(p), size, seed++);
    blocks.push_back(p);
  }
  seed = 1;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    PROBE_CHECK(holds(reinterpret_cast<std::uintptr_t>(blocks[i]), sizes[i], seed++));
  }
  void* async = nullptr;
  PROBE_CHECK(cudaMallocAsync(&async, 2 * MiB, cudaStreamPerThread) == cudaSuccess && async != nullptr);
  PROBE_CHECK(cudaFreeAsync(async, cudaStreamPerThread) == cudaSuccess);
  void* pitched = nullptr;
  std::size_t pitch = 0;
  PROBE_CHECK(cudaMallocPitch(&pitched, &pitch, 1000, 10) == cudaSuccess && pitch >= 1000 && pitch % 512 == 0);
  PROBE_CHECK(cudaFree(pitched) == cudaSuccess);

  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  PROBE_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  PROBE_CHECK(free_bytes <= total_bytes && total_bytes > 0);

  // Out of memory is the runtime's error, recorded where cudart records it,
  // and the allocator goes on working.
  void* huge = nullptr;
  PROBE_CHECK(cudaMalloc(&huge, std::size_t{1} << 40) == cudaErrorMemoryAllocation);
  PROBE_CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  PROBE_CHECK(cudaGetLastError() == cudaSuccess);

  for (void* p : blocks) PROBE_CHECK(cudaFree(p) == cudaSuccess);
  // A double free is invalid value, recorded likewise, and changes nothing.
  if (!blocks.empty()) {
    PROBE_CHECK(cudaFree(blocks.front()) == cudaErrorInvalidValue);
    PROBE_CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  }
  void* again = nullptr;
  PROBE_CHECK(cudaMalloc(&again, 1 * MiB) == cudaSuccess);
  PROBE_CHECK(cudaFree(again) == cudaSuccess);
  std::fprintf(stderr, "counts: cudart_malloc_calls=%llu sim_cuMemAlloc=%llu\n",
               static_cast<unsigned long long>(mini_cudart_calls("cudaMalloc")),
               static_cast<unsigned long long>(tidepool_sim_call_count("cuMemAlloc_v2")));
  return probe::finish("runtime");
}

// How often a cached cudaFree-style pair and a stream-ordered one on
// `stream` ask the driver whether a stream is capturing.
std::uint64_t capture_questions_in_pairs(CUstream stream) {
  const std::uint64_t asked = tidepool_sim_call_count("cuStreamIsCapturing");
  CUdeviceptr pair = 0;
  PROBE_CHECK(cuMemAlloc(&pair, 4096) == CUDA_SUCCESS && cuMemFree(pair) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemAllocAsync(&pair, 4096, stream) == CUDA_SUCCESS && cuMemFreeAsync(pair, stream) == CUDA_SUCCESS);
  return tidepool_sim_call_count("cuStreamIsCapturing") - asked;
}

void print_capture_questions(std::uint64_t before, std::uint64_t after) {
  std::fprintf(stderr, "capture_questions_before=%llu\ncapture_questions_after=%llu\n",
               static_cast<unsigned long long>(before), static_cast<unsigned long long>(after));
}

// A range the program maps itself, as NCCL does: tidepool must leave it alone.
CUdeviceptr map_own_range(std::size_t* size, CUmemGenericAllocationHandle* handle) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  PROBE_CHECK(cuMemGetAllocationGranularity(size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS);
  CUdeviceptr va = 0;
  PROBE_CHECK(cuMemAddressReserve(&va, *size, 0, 0, 0) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemCreate(handle, *size, &prop, 0) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemMap(va, *size, 0, *handle, 0) == CUDA_SUCCESS);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  PROBE_CHECK(cuMemSetAccess(va, *size, &access, 1) == CUDA_SUCCESS);
  return va;
}

int driver_route() {
  make_context_current();
  CUdeviceptr a = 0;
  PROBE_CHECK(cuMemAlloc(&a, 5 * MiB + 3) == CUDA_SUCCESS && a != 0);
  fill(a, 5 * MiB + 3, 9);
  PROBE_CHECK(holds(a, 5 * MiB + 3, 9));

  // Interior pointers resolve to the block, not to the segment beneath.
  CUdeviceptr base = 0;
  std::size_t size = 0;
  PROBE_CHECK(cuMemGetAddressRange(&base, &size, a + 4096) == CUDA_SUCCESS);
  PROBE_CHECK(base == a && size >= 5 * MiB + 3 && size < 6 * MiB);
  CUdeviceptr start = 0;
  PROBE_CHECK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a + 100) == CUDA_SUCCESS);
  PROBE_CHECK(start == a);
  unsigned memory_type = 0;
  int ordinal = -1;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void* values[] = {&memory_type, &ordinal};
  PROBE_CHECK(cuPointerGetAttributes(2, attributes, values, a) == CUDA_SUCCESS);
  PROBE_CHECK(memory_type == CU_MEMORYTYPE_DEVICE && ordinal == 0);

  CUstream stream = nullptr;
  PROBE_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUdeviceptr b = 0;
  PROBE_CHECK(cuMemAllocAsync(&b, 3 * MiB, stream) == CUDA_SUCCESS && b != 0);
  PROBE_CHECK(cuMemFreeAsync(b, stream) == CUDA_SUCCESS);
  CUdeviceptr pitched = 0;
  std::size_t pitch = 0;
  PROBE_CHECK(cuMemAllocPitch(&pitched, &pitch, 1000, 8, 4) == CUDA_SUCCESS && pitch >= 1000);
  PROBE_CHECK(cuMemFree(pitched) == CUDA_SUCCESS);
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  PROBE_CHECK(cuMemGetInfo(&free_bytes, &total_bytes) == CUDA_SUCCESS && free_bytes <= total_bytes);

  // What the driver says, either way: an overflowing pitched request is
  // invalid, a freed address answers no attribute, a buffer id never repeats.
  PROBE_CHECK(cuMemAllocPitch(&pitched, &pitch, SIZE_MAX / 2, 4, 4) == CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr c = 0;
  unsigned long long id_c = 0;
  PROBE_CHECK(cuMemAlloc(&c, 1000) == CUDA_SUCCESS);
  PROBE_CHECK(cuPointerGetAttribute(&id_c, CU_POINTER_ATTRIBUTE_BUFFER_ID, c) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemFree(c) == CUDA_SUCCESS);
  CUdeviceptr freed_start = 0;
  PROBE_CHECK(cuPointerGetAttribute(&freed_start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, c) != CUDA_SUCCESS);
  CUdeviceptr d = 0;
  unsigned long long id_d = 0;
  PROBE_CHECK(cuMemAlloc(&d, 1000) == CUDA_SUCCESS);
  PROBE_CHECK(cuPointerGetAttribute(&id_d, CU_POINTER_ATTRIBUTE_BUFFER_ID, d) == CUDA_SUCCESS);
  PROBE_CHECK(id_c != id_d);
  CUdeviceptr range_base = 0;
  std::size_t range_size = 0;
  if (cuMemGetAddressRange(&range_base, &range_size, d + 999) == CUDA_SUCCESS) {
    PROBE_CHECK(range_base <= d + 999 && d + 999 < range_base + range_size);
  }
  PROBE_CHECK(cuMemFree(d) == CUDA_SUCCESS);

  PROBE_CHECK(cuMemFree(a) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemFree(a) == CUDA_ERROR_INVALID_VALUE);  // double free
  CUdeviceptr oom = 0;
  PROBE_CHECK(cuMemAlloc(&oom, std::size_t{1} << 40) == CUDA_ERROR_OUT_OF_MEMORY);

  // Foreign pointers go to the driver untouched.
  const std::uint64_t frees_before = tidepool_sim_call_count("cuMemFree_v2");
  std::size_t own_size = 0;
  CUmemGenericAllocationHandle own_handle = 0;
  const CUdeviceptr own = map_own_range(&own_size, &own_handle);
  fill(own, 4096, 3);
  PROBE_CHECK(cuMemFree(own) != CUDA_SUCCESS);  // not a cuMemAlloc pointer: the driver says so
  PROBE_CHECK(tidepool_sim_call_count("cuMemFree_v2") == frees_before + 1);
  PROBE_CHECK(holds(own, 4096, 3));
  PROBE_CHECK(cuMemUnmap(own, own_size) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemRelease(own_handle) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemAddressFree(own, own_size) == CUDA_SUCCESS);
  void* host = nullptr;
  PROBE_CHECK(cuMemAllocHost(&host, 4096) == CUDA_SUCCESS);
  unsigned host_type = 0;
  PROBE_CHECK(cuPointerGetAttribute(&host_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    reinterpret_cast<CUdeviceptr>(host)) == CUDA_SUCCESS);
  PROBE_CHECK(host_type == CU_MEMORYTYPE_HOST);
  PROBE_CHECK(cuMemFreeHost(host) == CUDA_SUCCESS);

  // Whether a stream is capturing is asked of the driver only once a
  // capture has begun: how often a cached pair of each kind asks, before
  // the program's first capture and after it.
  const std::uint64_t asked_before_capture = capture_questions_in_pairs(stream);
  // During stream capture the call goes to the driver, both ways.
  const std::uint64_t async_before = tidepool_sim_call_count("cuMemAllocAsync");
  PROBE_CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  CUdeviceptr captured = 0;
  PROBE_CHECK(cuMemAllocAsync(&captured, 1 * MiB, stream) == CUDA_SUCCESS);
  PROBE_CHECK(tidepool_sim_call_count("cuMemAllocAsync") == async_before + 1);
  PROBE_CHECK(cuMemFreeAsync(captured, stream) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  PROBE_CHECK(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS && graph != nullptr);
  PROBE_CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  print_capture_questions(asked_before_capture, capture_questions_in_pairs(stream));
  PROBE_CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  PROBE_CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  std::fprintf(stderr, "counts: sim_cuMemAlloc=%llu\n",
               static_cast<unsigned long long>(tidepool_sim_call_count("cuMemAlloc_v2")));
  return probe::finish("driver");
}

// A capture begun only with cuStreamBeginCaptureToGraph, in its plain or
// per-thread form, is seen as one: an allocation into it goes to the
// driver and lands in the program's graph, which cuStreamEndCapture (in the
// same form) hands back; cached pairs ask about captures only after it.
int capture_to_graph_route(bool per_thread) {
  make_context_current();
  using BeginToGraph =
      CUresult (*)(CUstream, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, std::size_t, CUstreamCaptureMode);
  using EndCapture = CUresult (*)(CUstream, CUgraph*);
  const auto begin = per_thread
                         ? reinterpret_cast<BeginToGraph>(dlsym(RTLD_DEFAULT, "cuStreamBeginCaptureToGraph_ptsz"))
                         : &cuStreamBeginCaptureToGraph;
  const auto end =
      per_thread ? reinterpret_cast<EndCapture>(dlsym(RTLD_DEFAULT, "cuStreamEndCapture_ptsz")) : &cuStreamEndCapture;
  PROBE_CHECK(begin != nullptr && end != nullptr);
  CUstream stream = nullptr;
  PROBE_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  if (begin == nullptr || end == nullptr || stream == nullptr) return probe::finish("capture_to_graph");
  const std::uint64_t asked_before_capture = capture_questions_in_pairs(stream);
  CUgraph graph = nullptr;
  PROBE_CHECK(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  const std::uint64_t async_before = tidepool_sim_call_count("cuMemAllocAsync");
  PROBE_CHECK(begin(stream, graph, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  CUdeviceptr captured = 0;
  PROBE_CHECK(cuMemAllocAsync(&captured, 1 * MiB, stream) == CUDA_SUCCESS);
  PROBE_CHECK(tidepool_sim_call_count("cuMemAllocAsync") == async_before + 1);
  PROBE_CHECK(cuMemFreeAsync(captured, stream) == CUDA_SUCCESS);
  CUgraph ended = nullptr;
  PROBE_CHECK(end(stream, &ended) == CUDA_SUCCESS && ended == graph);
  std::size_t nodes = 0;
  PROBE_CHECK(cuGraphGetNodes(graph, nullptr, &nodes) == CUDA_SUCCESS && nodes == 2);  // allocation and free
  PROBE_CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  print_capture_questions(asked_before_capture, capture_questions_in_pairs(stream));
  PROBE_CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  PROBE_CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  return probe::finish("capture_to_graph");
}

int threads_route() {
  make_context_current();
  CUcontext context = nullptr;
  cuCtxGetCurrent(&context);
  constexpr int kThreads = 8;
  constexpr int kRounds = 300;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      cuCtxSetCurrent(context);
      CUstream stream = nullptr;
      if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        bad++;
        return;
      }
      std::uint64_t state = 0x9e3779b97f4a7c15ull * static_cast<unsigned>(t + 1);
      std::vector<std::pair<CUdeviceptr, std::size_t>> live;
      for (int round = 0; round < kRounds; ++round) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const std::size_t size = 256 + (state >> 33) % (3 * MiB);
        CUdeviceptr p = 0;
        if (const CUresult r = cuMemAllocAsync(&p, size, stream); r != CUDA_SUCCESS) {
          std::fprintf(stderr, "thread %d: cuMemAllocAsync(%zu) = %d\n", t, size, static_cast<int>(r));
          bad++;
          continue;
        }
        // Written from the host: the stream must be idle on this block.
        cuStreamSynchronize(stream);
        fill(p, std::min<std::size_t>(size, 4096), static_cast<unsigned>(t));
        live.emplace_back(p, size);
        if (live.size() > 6 || (state & 1) != 0) {
          auto [q, q_size] = live.front();
          live.erase(live.begin());
          if (!holds(q, std::min<std::size_t>(q_size, 4096), static_cast<unsigned>(t))) bad++;
          if (cuMemFreeAsync(q, stream) != CUDA_SUCCESS) bad++;
        }
      }
      for (auto [q, q_size] : live) {
        if (!holds(q, std::min<std::size_t>(q_size, 4096), static_cast<unsigned>(t))) bad++;
        if (cuMemFreeAsync(q, stream) != CUDA_SUCCESS) bad++;
      }
      cuStreamSynchronize(stream);
      cuStreamDestroy(stream);
    });
  }
  for (auto& th : threads) th.join();
  PROBE_CHECK(bad.load() == 0);
  return probe::finish("threads");
}

int fork_route(const char* report_path) {
  make_context_current();
  CUdeviceptr before = 0;
  PROBE_CHECK(cuMemAlloc(&before, 2 * MiB) == CUDA_SUCCESS);
  fill(before, 2 * MiB, 5);
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    // The child sees the parent's memory image and exits the ordinary way,
    // running atexit handlers; it must neither hang nor write the report.
    std::exit(holds(before, 2 * MiB, 5) ? 7 : 8);
  }
  int status = 0;
  PROBE_CHECK(waitpid(child, &status, 0) == child);
  PROBE_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
  if (report_path != nullptr) PROBE_CHECK(access(report_path, F_OK) != 0);
  CUdeviceptr after = 0;
  PROBE_CHECK(cuMemAlloc(&after, 1 * MiB) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemFree(before) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemFree(after) == CUDA_SUCCESS);
  return probe::finish("fork");
}

// A "kernel" that sleeps, then fills its block with 0xAA: a late writer.
void slow_fill(void** params, void* /*user*/) {
  const auto address = *static_cast<CUdeviceptr*>(params[0]);
  const auto size = *static_cast<std::size_t*>(params[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::memset(reinterpret_cast<void*>(address), 0xAA, size);
}

int fork_alloc_route() {
  make_context_current();
  CUfunction kernel = nullptr;
  const std::size_t sizes[] = {sizeof(CUdeviceptr), sizeof(std::size_t)};
  PROBE_CHECK(tidepool_sim_register_kernel(&kernel, &slow_fill, nullptr, 2, sizes) == CUDA_SUCCESS);
  CUstream stream = nullptr;
  PROBE_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUdeviceptr kept = 0;
  CUdeviceptr busy = 0;
  PROBE_CHECK(cuMemAlloc(&kept, 2 * MiB) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemAllocAsync(&busy, 4 * MiB, stream) == CUDA_SUCCESS);
  fill(kept, 2 * MiB, 9);
  std::size_t size = 4 * MiB;
  void* params[] = {&busy, &size};
  PROBE_CHECK(cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemFreeAsync(busy, stream) == CUDA_SUCCESS);  // behind the queued write
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = fork();
  if (child == 0) {
    alarm(30);  // a hang becomes SIGALRM, which the parent sees
    int step = 0;
    auto expect = [&step](bool passed) {
      ++step;
      if (!passed) {
        std::fprintf(stderr, "fork_alloc child: step %d failed\n", step);
        std::_Exit(8);
      }
    };
    // The driver is unusable after a fork: each call gets its answer
    // (CUDA_ERROR_NOT_INITIALIZED) promptly, the pool's blocks included.
    CUdeviceptr mine = 0;
    expect(cuMemAlloc(&mine, 12 * MiB) == CUDA_ERROR_NOT_INITIALIZED);
    expect(cuMemAllocAsync(&mine, 1 * MiB, stream) == CUDA_ERROR_NOT_INITIALIZED);
    expect(cuMemFreeAsync(busy, stream) == CUDA_ERROR_NOT_INITIALIZED);
    expect(cuMemFree(kept) == CUDA_ERROR_NOT_INITIALIZED);
    expect(cuStreamSynchronize(stream) == CUDA_ERROR_NOT_INITIALIZED);
    // The parent's block, as the fork left it, is still readable.
    expect(holds(kept, 2 * MiB, 9));
    // Not exit(): the leak checker of the sanitizer build would count what
    // the parent's threads own. The "fork" mode covers exit handlers.
    std::_Exit(7);
  }
  int status = 0;
  PROBE_CHECK(waitpid(child, &status, 0) == child);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 7) {
    std::fprintf(stderr, "fork_alloc child: %s %d\n", WIFEXITED(status) ? "exit" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  }
  PROBE_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
  // The parent's pool goes on: its budget is intact and its data too.
  CUdeviceptr after = 0;
  PROBE_CHECK(cuMemAllocAsync(&after, 4 * MiB, stream) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemFreeAsync(after, stream) == CUDA_SUCCESS);
  PROBE_CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  PROBE_CHECK(holds(kept, 2 * MiB, 9));
  PROBE_CHECK(cuMemFree(kept) == CUDA_SUCCESS);
  PROBE_CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  return probe::finish("fork_alloc");
}

// `through_stream`: the new owners write with cuMemsetD8 (the legacy stream)
// rather than from the host: what a device barrier orders (free_barrier:on).
int sidestream_route(bool through_stream) {
  make_context_current();
  CUfunction kernel = nullptr;
  const std::size_t sizes[] = {sizeof(CUdeviceptr), sizeof(std::size_t)};
  PROBE_CHECK(tidepool_sim_register_kernel(&kernel, &slow_fill, nullptr, 2, sizes) == CUDA_SUCCESS);
  auto launch = [&](CUstream stream, CUdeviceptr address, std::size_t size) {
    void* params[] = {&address, &size};
    PROBE_CHECK(cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS);
  };
  constexpr std::size_t kBlock = 2 * MiB;
  CUstream live_side = nullptr;
  CUstream dying_side = nullptr;
  PROBE_CHECK(cuStreamCreate(&live_side, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  PROBE_CHECK(cuStreamCreate(&dying_side, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  PROBE_CHECK(cuMemAlloc(&a, kBlock) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemAlloc(&b, kBlock) == CUDA_SUCCESS);
  launch(live_side, a, kBlock);
  launch(dying_side, b, kBlock);
  PROBE_CHECK(cuStreamDestroy(dying_side) == CUDA_SUCCESS);  // its write still queued
  PROBE_CHECK(cuMemFree(a) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemFree(b) == CUDA_SUCCESS);
  // The budget (device_limit:8MiB under the preload) leaves only the freed
  // pages for two of these four blocks.
  std::vector<CUdeviceptr> blocks;
  for (unsigned i = 0; i < 4; ++i) {
    CUdeviceptr p = 0;
    PROBE_CHECK(cuMemAlloc(&p, kBlock) == CUDA_SUCCESS);
    if (p == 0) continue;
    if (through_stream) {
      PROBE_CHECK(cuMemsetD8(p, static_cast<unsigned char>(20 + i), kBlock) == CUDA_SUCCESS);
    } else {
      fill(p, kBlock, 20 + i);
    }
    blocks.push_back(p);
  }
  PROBE_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
  for (unsigned i = 0; i < blocks.size(); ++i) {
    // A late write would have left 0xAA.
    if (through_stream) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(blocks[i]);
      PROBE_CHECK(std::count(bytes, bytes + kBlock, static_cast<unsigned char>(20 + i)) ==
                  static_cast<std::ptrdiff_t>(kBlock));
    } else {
      PROBE_CHECK(holds(blocks[i], kBlock, 20 + i));
    }
    PROBE_CHECK(cuMemFree(blocks[i]) == CUDA_SUCCESS);
  }
  PROBE_CHECK(cuStreamDestroy(live_side) == CUDA_SUCCESS);
  return probe::finish(through_stream ? "sidestream_ordered" : "sidestream");
}

// cudaFree-style frees of blocks a slow write still fills, in a program that
// creates no stream. Either everything goes on the legacy stream, or
// (`per_thread`) the old writes go on this thread's per-thread default
// stream and the new owners' sets on another thread's, which does not wait
// for it. The old writes must land first either way: by the legacy stream's
// own order, or behind a device barrier.
// The new owners of freed blocks: `count` blocks of `size`, block i set to
// 20 + i on the legacy stream, or (`per_thread`) on another thread's
// per-thread default stream, which does not wait for this thread's.
std::vector<CUdeviceptr> new_owners_set(unsigned count, std::size_t size, bool per_thread) {
  std::vector<CUdeviceptr> blocks;
  for (unsigned i = 0; i < count; ++i) {
    CUdeviceptr p = 0;
    PROBE_CHECK(cuMemAlloc(&p, size) == CUDA_SUCCESS);
    const auto value = static_cast<unsigned char>(20 + i);
    if (per_thread) {
      std::thread([&] {
        make_context_current();
        PROBE_CHECK(cuMemsetD8Async(p, value, size, CU_STREAM_PER_THREAD) == CUDA_SUCCESS);
      }).join();
    } else {
      PROBE_CHECK(cuMemsetD8(p, value, size) == CUDA_SUCCESS);
    }
    blocks.push_back(p);
  }
  return blocks;
}

// Once the device is idle, every new owner's bytes are its own (an old
// write landing late would have left 0xAA), and the blocks are freed.
void check_new_owners_then_free(const std::vector<CUdeviceptr>& blocks, std::size_t size) {
  PROBE_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
  for (unsigned i = 0; i < blocks.size(); ++i) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(blocks[i]);
    PROBE_CHECK(std::count(bytes, bytes + size, static_cast<unsigned char>(20 + i)) ==
                static_cast<std::ptrdiff_t>(size));
    PROBE_CHECK(cuMemFree(blocks[i]) == CUDA_SUCCESS);
  }
}

// The same with no launch at all: the old write is a cuStreamWriteValue32 on
// this thread's per-thread stream, held behind a slow host function (which
// the preload does not hook); the new owner's set goes on another thread's
// per-thread stream. It must land after the old word all the same.
void slow_host_function(void* /*user*/) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }

// `how`: "write" (cuStreamWriteValue32), "batch_write" (the same word in a
// cuStreamBatchMemOp) or "batch_copy" (0xAA over the whole block by
// cuMemcpyBatchAsync).
// The stream memory operations of CUDA before 11.7, as a program built then
// links them (cuda.h renames these names to the _v2 forms).
extern "C" CUresult probe_cuStreamWriteValue32_v1(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                                  unsigned int flags) __asm__("cuStreamWriteValue32");
extern "C" CUresult probe_cuStreamBatchMemOp_v1(CUstream s, unsigned int count, CUstreamBatchMemOpParams* ops,
                                                unsigned int flags) __asm__("cuStreamBatchMemOp");

int per_thread_write_route(const std::string& how) {
  make_context_current();
  constexpr std::size_t kBlock = 2 * MiB;
  CUdeviceptr old_block = 0;
  PROBE_CHECK(cuMemAlloc(&old_block, kBlock) == CUDA_SUCCESS);
  PROBE_CHECK(cuLaunchHostFunc(CU_STREAM_PER_THREAD, &slow_host_function, nullptr) == CUDA_SUCCESS);
  if (how == "write") {
    PROBE_CHECK(cuStreamWriteValue32(CU_STREAM_PER_THREAD, old_block, 0xAAAAAAAAu, 0) == CUDA_SUCCESS);
  } else if (how == "write_v1") {
    PROBE_CHECK(probe_cuStreamWriteValue32_v1(CU_STREAM_PER_THREAD, old_block, 0xAAAAAAAAu, 0) == CUDA_SUCCESS);
  } else if (how == "batch_write" || how == "batch_write_v1") {
    CUstreamBatchMemOpParams op{};
    op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.address = old_block;
    op.writeValue.value = 0xAAAAAAAAu;
    const auto batch = how == "batch_write" ? &cuStreamBatchMemOp : &probe_cuStreamBatchMemOp_v1;
    PROBE_CHECK(batch(CU_STREAM_PER_THREAD, 1, &op, 0) == CUDA_SUCCESS);
  } else {
    const std::vector<unsigned char> old_bytes(kBlock, 0xAA);
    CUdeviceptr dst = old_block;
    auto src = reinterpret_cast<CUdeviceptr>(old_bytes.data());
    std::size_t size = kBlock;
    CUmemcpyAttributes attrs{};
    attrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
    std::size_t first = 0;
    PROBE_CHECK(cuMemcpyBatchAsync(&dst, &src, &size, 1, &attrs, &first, 1, CU_STREAM_PER_THREAD) == CUDA_SUCCESS);
  }
  PROBE_CHECK(cuMemFree(old_block) == CUDA_SUCCESS);
  // The budget (device_limit:4MiB under the preload) leaves the freed page
  // for one of these two blocks.
  check_new_owners_then_free(new_owners_set(2, kBlock, /*per_thread=*/true), kBlock);
  return probe::finish(("per_thread_" + how).c_str());
}

// After the first round, `second_context`: how a second context (device
// 1's) comes in before the first is made current again, after which the
// same round runs on the legacy stream, whose order is no barrier any more:
// none, its primary context made current, or one the program creates
// (cuCtxCreate makes it current).
enum class SecondContext { none, primary, created };

// Cached cudaFree-style pairs while a non-blocking stream exists, idle
// after one set. `work`: each block is set before it is freed, on the
// legacy stream ("legacy"), a blocking stream ("blocking") or the
// per-thread default stream ("per_thread"), so that each barrier has new
// work to cover; "" for none.
int idle_stream_pairs_route(const std::string& work) {
  make_context_current();
  const bool with_work = !work.empty();
  CUstream stream = nullptr;
  PROBE_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUstream work_stream = nullptr;
  if (work == "blocking") PROBE_CHECK(cuStreamCreate(&work_stream, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
  if (work == "per_thread") work_stream = CU_STREAM_PER_THREAD;
  const std::size_t sizes[] = {512, 4096, 65536, MiB, 8 * MiB};
  CUdeviceptr first = 0;
  PROBE_CHECK(cuMemAlloc(&first, MiB) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemsetD8Async(first, 1, MiB, stream) == CUDA_SUCCESS);
  PROBE_CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemFree(first) == CUDA_SUCCESS);
  constexpr int kPairs = 400;
  for (int i = 0; i < kPairs; ++i) {
    CUdeviceptr p = 0;
    const std::size_t size = sizes[i % 5];
    PROBE_CHECK(cuMemAlloc(&p, size) == CUDA_SUCCESS);
    if (with_work) {
      PROBE_CHECK(cuMemsetD8Async(p, static_cast<unsigned char>(i), size, work_stream) == CUDA_SUCCESS);
    }
    PROBE_CHECK(cuMemFree(p) == CUDA_SUCCESS);
  }
  // The stream's first submission after those barriers: a block of the
  // largest size set on it after the legacy stream's sets of the block
  // before it, and every byte its own.
  CUdeviceptr last = 0;
  PROBE_CHECK(cuMemAlloc(&last, 8 * MiB) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemsetD8Async(last, 0x5A, 8 * MiB, stream) == CUDA_SUCCESS);
  PROBE_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
  const auto* bytes = reinterpret_cast<const unsigned char*>(last);
  PROBE_CHECK(std::count(bytes, bytes + 8 * MiB, static_cast<unsigned char>(0x5A)) ==
              static_cast<std::ptrdiff_t>(8 * MiB));
  PROBE_CHECK(cuMemFree(last) == CUDA_SUCCESS);
  PROBE_CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  if (work == "blocking") PROBE_CHECK(cuStreamDestroy(work_stream) == CUDA_SUCCESS);
  return probe::finish(with_work ? "idle_stream_pairs_with_work" : "idle_stream_pairs");
}

int one_stream_route(bool per_thread, SecondContext second_context = SecondContext::none) {
  make_context_current();
  CUfunction kernel = nullptr;
  const std::size_t sizes[] = {sizeof(CUdeviceptr), sizeof(std::size_t)};
  PROBE_CHECK(tidepool_sim_register_kernel(&kernel, &slow_fill, nullptr, 2, sizes) == CUDA_SUCCESS);
  constexpr std::size_t kBlock = 2 * MiB;
  const auto round = [&] {
    std::vector<CUdeviceptr> old_blocks(2);
    for (CUdeviceptr& p : old_blocks) {
      PROBE_CHECK(cuMemAlloc(&p, kBlock) == CUDA_SUCCESS);
      std::size_t size = kBlock;
      void* params[] = {&p, &size};
      CUstream stream = per_thread ? CU_STREAM_PER_THREAD : nullptr;
      PROBE_CHECK(cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS);
    }
    for (CUdeviceptr p : old_blocks) PROBE_CHECK(cuMemFree(p) == CUDA_SUCCESS);
    // The budget (device_limit:8MiB under the preload) leaves only the freed
    // pages for two of these four blocks.
    check_new_owners_then_free(new_owners_set(4, kBlock, per_thread), kBlock);
  };
  round();
  if (second_context == SecondContext::none) return probe::finish(per_thread ? "per_thread_stream" : "legacy_stream");
  CUcontext first = nullptr;
  CUcontext second = nullptr;
  CUdevice device = 0;
  PROBE_CHECK(cuCtxGetCurrent(&first) == CUDA_SUCCESS);
  PROBE_CHECK(cuDeviceGet(&device, 1) == CUDA_SUCCESS);
  if (second_context == SecondContext::created) {
    PROBE_CHECK(cuCtxCreate(&second, nullptr, 0, device) == CUDA_SUCCESS);
  } else {
    PROBE_CHECK(cuDevicePrimaryCtxRetain(&second, device) == CUDA_SUCCESS);
    PROBE_CHECK(cuCtxSetCurrent(second) == CUDA_SUCCESS);
  }
  PROBE_CHECK(cuCtxSetCurrent(first) == CUDA_SUCCESS);
  round();
  if (second_context == SecondContext::created) PROBE_CHECK(cuCtxDestroy(second) == CUDA_SUCCESS);
  return probe::finish(second_context == SecondContext::created ? "legacy_then_created_context"
                                                                : "legacy_then_second_context");
}

int evict_route() {
  make_context_current();
  constexpr std::size_t kBudget = 16 * MiB;
  constexpr std::size_t kBlock = 8 * MiB;
  constexpr std::size_t kBlocks = 8;  // 64 MiB live: four times the budget
  CUfunction fill_kernel = nullptr;
  CUfunction check_kernel = nullptr;
  register_word_kernels(&fill_kernel, &check_kernel);
  const bool budgeted =
      std::getenv("TIDEPOOL_CONF") != nullptr && std::strstr(std::getenv("TIDEPOOL_CONF"), "evict:on");
  // Under compressed eviction the data is half zeros, and only kernels read
  // it: a compressed page's address maps nothing, so the sim's host back
  // door would find no bytes there.
  const bool compressing = std::getenv("TIDEPOOL_CONF") != nullptr &&
                           std::strstr(std::getenv("TIDEPOOL_CONF"), "compress:") != nullptr &&
                           std::strstr(std::getenv("TIDEPOOL_CONF"), "compress:off") == nullptr;
  const std::uint32_t seed_flags = compressing ? probe::kSparseSeed : 0;
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> peak{0};
  std::thread watch([&] {
    while (!stop.load()) {
      peak.store(std::max(peak.load(), tidepool_sim_device_bytes_in_use()));
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  CUstream stream = nullptr;
  PROBE_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  std::atomic<std::uint64_t> errors{0};
  std::atomic<std::uint64_t>* errors_at = &errors;
  auto fill_block = [&](CUdeviceptr p, std::uint32_t seed) {
    auto* words = reinterpret_cast<std::uint32_t*>(p);
    std::size_t count = kBlock / 4;
    void* params[] = {&words, &count, &seed};
    PROBE_CHECK(cuLaunchKernel(fill_kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS);
  };
  auto check_block = [&](CUdeviceptr p, std::uint32_t seed) {
    auto* words = reinterpret_cast<std::uint32_t*>(p);
    std::size_t count = kBlock / 4;
    void* params[] = {&words, &count, &seed, &errors_at};
    PROBE_CHECK(cuLaunchKernel(check_kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS);
  };
  std::vector<CUdeviceptr> blocks(kBlocks, 0);
  std::vector<std::uint32_t> seeds(kBlocks, 0);
  for (std::size_t b = 0; b < kBlocks; ++b) {
    PROBE_CHECK(cuMemAlloc(&blocks[b], kBlock) == CUDA_SUCCESS);
    seeds[b] = seed_flags | static_cast<std::uint32_t>(100 + b);
    if (blocks[b] != 0) fill_block(blocks[b], seeds[b]);
  }
  unsigned state = 12345;
  for (int round = 0; round < 40; ++round) {
    state = state * 1103515245u + 12345u;
    const std::size_t b = (state >> 8) % kBlocks;
    if (blocks[b] == 0) continue;
    check_block(blocks[b], seeds[b]);
    seeds[b] += 7919;
    fill_block(blocks[b], seeds[b]);
    if (round % 10 == 9) {
      // Both free modes beside the evictions: a cudaFree-style block and a
      // stream-ordered one, each written by a kernel first.
      CUdeviceptr scratch = 0;
      PROBE_CHECK(cuMemAlloc(&scratch, kBlock) == CUDA_SUCCESS);
      if (scratch != 0) fill_block(scratch, 7);
      PROBE_CHECK(cuMemFree(scratch) == CUDA_SUCCESS);
      CUdeviceptr ordered = 0;
      PROBE_CHECK(cuMemAllocAsync(&ordered, kBlock, stream) == CUDA_SUCCESS);
      if (ordered != 0) fill_block(ordered, 8);
      PROBE_CHECK(cuMemFreeAsync(ordered, stream) == CUDA_SUCCESS);
    }
  }
  for (std::size_t b = 0; b < kBlocks; ++b) {
    if (blocks[b] != 0) check_block(blocks[b], seeds[b]);
  }
  // One launch that names no pool block (host memory the sim's kernel can
  // reach): the report counts it as scanned, not as naming a block.
  std::vector<std::uint32_t> host_words(16, 0);
  {
    auto* words = host_words.data();
    std::size_t count = host_words.size();
    std::uint32_t seed = 3;
    void* params[] = {&words, &count, &seed};
    PROBE_CHECK(cuLaunchKernel(fill_kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS);
  }
  PROBE_CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  PROBE_CHECK(errors.load() == 0);
  PROBE_CHECK(host_words[15] == word_pattern(3, 15));
  // Every block's device pointer, evicted pages (compressed ones, whose
  // address maps nothing, among them) or not.
  for (std::size_t b = 0; b < kBlocks; ++b) {
    if (blocks[b] == 0) continue;
    const CUdeviceptr last = blocks[b] + kBlock - 8;
    CUdeviceptr pointer = 0;
    PROBE_CHECK(cuPointerGetAttribute(&pointer, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, last) == CUDA_SUCCESS);
    PROBE_CHECK(pointer == last);
    // What cudaPointerGetAttributes asks: device memory has no host pointer.
    unsigned type = 0;
    void* host = &type;
    CUdeviceptr start = 0;
    pointer = 0;
    CUpointer_attribute asked[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                   CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
    void* answers[] = {&type, &host, &pointer, &start};
    PROBE_CHECK(cuPointerGetAttributes(4, asked, answers, last) == CUDA_SUCCESS);
    PROBE_CHECK(type == CU_MEMORYTYPE_DEVICE && host == nullptr && pointer == last && start == blocks[b]);
  }
  for (std::size_t b = 0; b < kBlocks; ++b) {
    if (blocks[b] == 0) continue;
    const auto* words = reinterpret_cast<const std::uint32_t*>(blocks[b]);
    std::uint64_t bad = 0;
    for (std::size_t i = 0; !compressing && i < kBlock / 4; ++i) bad += words[i] != word_pattern(seeds[b], i) ? 1 : 0;
    PROBE_CHECK(bad == 0);
    PROBE_CHECK(cuMemFree(blocks[b]) == CUDA_SUCCESS);
  }
  stop.store(true);
  watch.join();
  if (budgeted) PROBE_CHECK(peak.load() <= kBudget);
  PROBE_CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  return probe::finish("evict");
}

// Kernels from one host thread on a block that another thread's allocations
// keep evicting, as PyTorch's autograd thread launches the backward pass
// while the main thread allocates: thread A checks and rewrites its block
// with kernels on its own stream, over and over, never waiting; thread B
// allocates, fills and frees blocks that push A's block out to the host. A
// word of A's block wrong at any check, or a kernel touching a page
// mid-remap, is a failure. `kind` (PROBE_STREAM_KIND): A's stream,
// "nonblocking", "blocking" or "legacy".
int evict_threads_route(const char* kind) {
  make_context_current();
  CUcontext context = nullptr;
  cuCtxGetCurrent(&context);
  constexpr std::size_t kBlock = 8 * MiB;                // the budget (conf) holds two of them
  const char* rounds_env = std::getenv("PROBE_ROUNDS");  // fewer under a sanitizer
  const int kRounds = rounds_env != nullptr ? std::atoi(rounds_env) : 200;
  CUfunction fill_kernel = nullptr;
  CUfunction check_kernel = nullptr;
  register_word_kernels(&fill_kernel, &check_kernel);
  std::atomic<std::uint64_t> errors{0};
  std::atomic<std::uint64_t>* errors_at = &errors;
  const auto launch = [&](CUfunction f, CUstream stream, CUdeviceptr p, std::size_t bytes, std::uint32_t seed) {
    auto* words = reinterpret_cast<std::uint32_t*>(p);
    std::size_t count = bytes / 4;
    void* params[] = {&words, &count, &seed, &errors_at};
    return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
  };
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  CUdeviceptr mine = 0;
  std::uint32_t seed = 1;
  PROBE_CHECK(cuMemAlloc(&mine, kBlock) == CUDA_SUCCESS);
  std::thread a([&] {
    cuCtxSetCurrent(context);
    CUstream stream = nullptr;
    if (std::strcmp(kind, "legacy") != 0) {
      const unsigned flags = std::strcmp(kind, "blocking") == 0 ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING;
      if (cuStreamCreate(&stream, flags) != CUDA_SUCCESS) failures++;
    }
    if (launch(fill_kernel, stream, mine, kBlock, seed) != CUDA_SUCCESS) failures++;
    for (int round = 0; round < kRounds; ++round) {
      if (launch(check_kernel, stream, mine, kBlock, seed) != CUDA_SUCCESS) failures++;
      ++seed;
      if (launch(fill_kernel, stream, mine, kBlock, seed) != CUDA_SUCCESS) failures++;
      // Now and then the host waits for its own stream (a loss read back),
      // so that A's launches go on for as long as B evicts.
      if (round % 4 == 3 && cuStreamSynchronize(stream) != CUDA_SUCCESS) failures++;
    }
    if (launch(check_kernel, stream, mine, kBlock, seed) != CUDA_SUCCESS) failures++;
    if (cuStreamSynchronize(stream) != CUDA_SUCCESS) failures++;
    if (stream != nullptr) cuStreamDestroy(stream);
    done.store(true);
  });
  std::thread b([&] {
    cuCtxSetCurrent(context);
    CUstream stream = nullptr;
    if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) failures++;
    while (!done.load()) {
      CUdeviceptr p = 0;
      CUdeviceptr q = 0;
      if (cuMemAlloc(&p, kBlock) != CUDA_SUCCESS || cuMemAlloc(&q, kBlock) != CUDA_SUCCESS) failures++;
      if (p != 0 && launch(fill_kernel, stream, p, kBlock, 7) != CUDA_SUCCESS) failures++;
      if (q != 0 && launch(fill_kernel, stream, q, kBlock, 8) != CUDA_SUCCESS) failures++;
      if (p != 0 && launch(check_kernel, stream, p, kBlock, 7) != CUDA_SUCCESS) failures++;
      if (p != 0) cuMemFree(p);
      if (q != 0) cuMemFree(q);
      // A real device's launch queue is bounded: a host never runs unboundedly ahead.
      if (cuStreamSynchronize(stream) != CUDA_SUCCESS) failures++;
    }
    if (cuStreamSynchronize(stream) != CUDA_SUCCESS) failures++;
    cuStreamDestroy(stream);
  });
  a.join();
  b.join();
  PROBE_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
  std::fprintf(stderr, "evict_threads %s: %llu wrong words, %d failed calls\n", kind,
               static_cast<unsigned long long>(errors.load()), failures.load());
  PROBE_CHECK(failures.load() == 0);
  PROBE_CHECK(errors.load() == 0);
  const auto* words = reinterpret_cast<const std::uint32_t*>(mine);
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < kBlock / 4; ++i) bad += words[i] != word_pattern(seed, i) ? 1 : 0;
  PROBE_CHECK(bad == 0);
  PROBE_CHECK(cuMemFree(mine) == CUDA_SUCCESS);
  return probe::finish("evict_threads");
}

}  // namespace

CUmemoryPool pool_of(CUdeviceptr p) {
  CUmemoryPool pool = nullptr;
  PROBE_CHECK(cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p) == CUDA_SUCCESS);
  return pool;
}

int mempool_route() {
  make_context_current();
  CUfunction fill_kernel = nullptr;
  CUfunction check_kernel = nullptr;
  register_word_kernels(&fill_kernel, &check_kernel);
  std::atomic<std::uint64_t> wrong{0};
  CUstream stream = nullptr;
  PROBE_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  const auto write_and_check = [&](CUdeviceptr p, std::size_t bytes, std::uint32_t seed) {
    auto* words = reinterpret_cast<std::uint32_t*>(p);
    std::size_t count = bytes / 4;
    std::atomic<std::uint64_t>* errors = &wrong;
    void* params[] = {&words, &count, &seed, &errors};
    PROBE_CHECK(cuLaunchKernel(fill_kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS);
    PROBE_CHECK(cuLaunchKernel(check_kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS);
  };
  constexpr std::size_t kBytes = MiB;
  CUdeviceptr before = 0;
  PROBE_CHECK(cuMemAllocAsync(&before, kBytes, stream) == CUDA_SUCCESS);
  write_and_check(before, kBytes, 1);

  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool own = nullptr;
  PROBE_CHECK(cuMemPoolCreate(&own, &props) == CUDA_SUCCESS);
  PROBE_CHECK(cuDeviceSetMemPool(0, own) == CUDA_SUCCESS);
  CUmemoryPool current = nullptr;
  PROBE_CHECK(cuDeviceGetMemPool(&current, 0) == CUDA_SUCCESS && current == own);
  CUdeviceptr implicit = 0;
  CUdeviceptr named = 0;
  PROBE_CHECK(cuMemAllocAsync(&implicit, kBytes, stream) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemAllocFromPoolAsync(&named, kBytes, own, stream) == CUDA_SUCCESS);
  const int from_own = (pool_of(implicit) == own ? 1 : 0) + (pool_of(named) == own ? 1 : 0);
  write_and_check(implicit, kBytes, 2);
  write_and_check(named, kBytes, 3);
  PROBE_CHECK(cuMemFreeAsync(implicit, stream) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemFreeAsync(named, stream) == CUDA_SUCCESS);
  PROBE_CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);

  // Destroying the current pool makes the default one current again.
  PROBE_CHECK(cuMemPoolDestroy(own) == CUDA_SUCCESS);
  CUdeviceptr after = 0;
  PROBE_CHECK(cuMemAllocAsync(&after, kBytes, stream) == CUDA_SUCCESS);
  const bool after_from_own = pool_of(after) == own;
  write_and_check(after, kBytes, 4);
  PROBE_CHECK(cuMemFreeAsync(before, stream) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemFreeAsync(after, stream) == CUDA_SUCCESS);
  PROBE_CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  PROBE_CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  std::fprintf(stderr, "mempool: %d of 2 from the program's pool, %d after it was destroyed, %llu wrong words\n",
               from_own, after_from_own ? 1 : 0, static_cast<unsigned long long>(wrong.load()));
  PROBE_CHECK(from_own == 2 && !after_from_own && wrong.load() == 0);
  return probe::finish("mempool");
}

// cuMemAlloc blocks of `bytes` until one fails or `most` are held; all freed.
int blocks_that_fit(std::size_t bytes, int most) {
  std::vector<CUdeviceptr> held;
  for (int i = 0; i < most; ++i) {
    CUdeviceptr p = 0;
    if (cuMemAlloc(&p, bytes) != CUDA_SUCCESS) break;
    held.push_back(p);
  }
  for (CUdeviceptr p : held) PROBE_CHECK(cuMemFree(p) == CUDA_SUCCESS);
  return static_cast<int>(held.size());
}

int foreign_route() {
  make_context_current();
  const int before = blocks_that_fit(8 * MiB, 10);  // the pool keeps their pages
  constexpr std::size_t kOutside = 40 * MiB;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = 0;
  PROBE_CHECK(cuMemCreate(&handle, kOutside, &prop, 0) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemAddressReserve(&va, kOutside, 0, 0, 0) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemMap(va, kOutside, 0, handle, 0) == CUDA_SUCCESS);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  PROBE_CHECK(cuMemSetAccess(va, kOutside, &access, 1) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemRelease(handle) == CUDA_SUCCESS);  // still mapped: still held
  fill(static_cast<std::uintptr_t>(va), kOutside, 5);
  const int beside = blocks_that_fit(8 * MiB, 10);
  PROBE_CHECK(holds(static_cast<std::uintptr_t>(va), kOutside, 5));
  PROBE_CHECK(cuMemUnmap(va, kOutside) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemAddressFree(va, kOutside) == CUDA_SUCCESS);
  const int after = blocks_that_fit(8 * MiB, 10);
  std::fprintf(stderr, "foreign: %d blocks before, %d beside 40 MiB made outside, %d after it was unmapped\n", before,
               beside, after);
  return probe::finish("foreign");
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "runtime") return runtime_route();
  if (mode == "driver") return driver_route();
  if (mode == "threads") return threads_route();
  if (mode == "capture_to_graph") return capture_to_graph_route(false);
  if (mode == "capture_to_graph_ptsz") return capture_to_graph_route(true);
  if (mode == "fork") return fork_route(argc > 2 ? argv[2] : nullptr);
  if (mode == "fork_alloc") return fork_alloc_route();
  if (mode == "sidestream") return sidestream_route(false);
  if (mode == "sidestream_ordered") return sidestream_route(true);
  if (mode == "legacy_stream") return one_stream_route(false);
  if (mode == "per_thread_stream") return one_stream_route(true);
  if (mode == "legacy_then_second_context") return one_stream_route(false, SecondContext::primary);
  if (mode == "legacy_then_created_context") return one_stream_route(false, SecondContext::created);
  if (mode == "per_thread_write") return per_thread_write_route("write");
  if (mode == "per_thread_batch_write") return per_thread_write_route("batch_write");
  if (mode == "per_thread_write_v1") return per_thread_write_route("write_v1");
  if (mode == "per_thread_batch_write_v1") return per_thread_write_route("batch_write_v1");
  if (mode == "per_thread_batch_copy") return per_thread_write_route("batch_copy");
  if (mode == "idle_stream_pairs") return idle_stream_pairs_route("");
  if (mode == "idle_stream_pairs_with_work") return idle_stream_pairs_route("legacy");
  if (mode == "idle_stream_pairs_with_blocking_work") return idle_stream_pairs_route("blocking");
  if (mode == "idle_stream_pairs_with_per_thread_work") return idle_stream_pairs_route("per_thread");
  if (mode == "evict") return evict_route();
  if (mode == "mempool") return mempool_route();
  if (mode == "foreign") return foreign_route();
  if (mode == "evict_threads") {
    const char* kind = std::getenv("PROBE_STREAM_KIND");
    return evict_threads_route(kind != nullptr ? kind : "nonblocking");
  }
  std::fprintf(stderr, "usage: probe_linked runtime|driver|threads|fork [report-path]\n");
  return 2;
}
