// Races between a program's submissions and tidepool's page moves, each
// forced into one exact interleaving, for preload_test's residency-rule
// tests. Every byte is checked through the device path (kernels and
// cuMemcpy*), never through a host pointer.
//
//   probe_races window [report-path]
//     Thread A's launch on a non-blocking stream names its block X and is
//     held inside the driver call (a signal the sim raises as cuLaunchKernel
//     is entered, after the preload's scan) while thread B's allocation
//     makes room; B is held in turn inside its move's gate
//     (cuStreamWaitValue32) until A's kernel runs: A's launch lands between
//     its stream's join and its wait, the gate's window. With
//     evict_policy:largest X is the block eviction would take. The kernel
//     writes X slowly, so a move of X under it loses words or faults.
//   probe_races copies [report-path]
//     Under a repeating step, each step copies its next batch into a
//     persistent input block with cuMemcpyHtoD, reads it with kernels, and
//     reads a persistent block back with cuMemcpyDtoH after synchronising
//     its stream: the program's own copies, which no launch names.
//   probe_races batch_copies [report-path]
//     The same, each copy a cuMemcpyBatchAsync of two halves on the stream.
//   probe_races array_copies [report-path]
//     The same through a 1D CUDA array, 2 MiB at a time: cuMemcpyHtoA then
//     cuMemcpyAtoD in, cuMemcpyDtoA then cuMemcpyAtoH out.
//   probe_races batch_3d_copies [report-path]
//     The same through a 2D CUDA array by cuMemcpy3DBatchAsync on the
//     stream, the block's side a pointer operand.
//   probe_races capture [report-path]
//     A global-mode capture on one thread while another thread's allocation
//     needs room and a launch into the capture names a block on the host.
//   probe_races graph [report-path]
//     A captured graph's kernel updates a block each round while other
//     allocations keep evicting: its block must be on the device whenever
//     the graph runs (the sim counts kernel runs that read host pages).
//   probe_races graph_nodes [report-path]
//     A graph whose copy and set nodes (a D2D copy, a byte set) sit in a
//     child graph: the blocks they touch must stay on the device while the
//     graph exists (the sim counts graph copies and sets that touch host
//     pages), and hold what the graph wrote.
//   probe_races peer [report-path]
//     Kernels on device 0 use a block of device 1's pool that device 1's
//     allocations keep evicting (TIDEPOOL_SIM_DEVICES=2).
//   probe_races interleaved_spans [report-path]
//     Device 0's pool reserves its small arena, device 1's pool its large
//     one, then device 0's pool its large one: device 0's span of VA holds
//     device 1's blocks. Device 1's kernel naming its block X, which its
//     allocations evicted, must find X brought back first
//     (prefetch:launch), as with one device (TIDEPOOL_SIM_DEVICES=2).
//   probe_races peer_free [report-path]
//     Device 0's kernel writes device 1's block X slowly, through peer
//     access, when X is freed cudaFree-style; device 1 then takes a block of
//     X's size and sets it. The free waits for device 0's kernel, as native
//     cudaFree does: the new block keeps what was set (TIDEPOOL_SIM_DEVICES=2).
//   probe_races peer_after_bring_back [report-path]
//     Device 1's block X goes to the host and is freed; device 1 hands out
//     a block of its size, Y, over X's host pages, which come back through
//     a gate of device 1's streams. Device 0's kernel then writes Y at once,
//     through peer access: it must run after the copies that brought the
//     pages back, not be overwritten by them (TIDEPOOL_SIM_DEVICES=2, slow
//     copies).
//   probe_races copy_from_poolless_device [report-path]
//     Device 1, which has no pool, queues a copy of device 0's block X to
//     pinned host memory on its own stream, behind a slow kernel (copies
//     reach any device's memory without peer access), while device 0's
//     allocations need room and evict. No gate of device 0 orders device
//     1's stream: X must be held where it was when the copy was queued (the
//     sim counts the stream's copies that reached host pages), and the host
//     copy reads what X held (TIDEPOOL_SIM_DEVICES=2).
//   probe_races created_context [report-path]
//     A context the program creates on device 0 queues a kernel that reads
//     the pool's block X, behind a slow kernel, while the pool (in device
//     0's primary context) needs room and evicts. The pool's gates order
//     only its own context's streams: X must be held where it was when the
//     kernel was queued (the sim counts kernel runs that read host pages).
//   probe_races peer_access [report-path]
//     Kernels on device 1 reach device 0's blocks only while device 1 has
//     peer access to device 0: before cuCtxEnablePeerAccess they fault, then
//     they read and write blocks allocated before and after it (and, under a
//     budget, evicted to the host), and after cuCtxDisablePeerAccess they
//     fault again (TIDEPOOL_SIM_DEVICES=2); then a stream-ordered block of
//     device 0's default memory pool, reached only while the pool's access
//     list (cuMemPoolSetAccess) names device 1. The same natively: the sim
//     enforces the driver's rules for its own memory.
//   probe_races idle_stream [report-path]
//     A non-blocking stream S, joined by one barrier, then left idle: a
//     slow kernel on the legacy stream writes block X, X is freed
//     cudaFree-style, and a request of X's size takes it behind a barrier
//     that leaves S to catch up; S then sets the block. S's set must run
//     after the slow kernel (it waits for the barrier as it is queued), or
//     the kernel overwrites it. Prints the cuStreamWaitEvent calls the
//     barrier queued and those the set's catch-up queued.
//
// stderr's last line before the verdict: "races: W wrong words, F failed calls".
#include <cuda.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "probe_linked_common.hpp"
#include "sim/sim_control.h"
#include "support/cuda_arrays.hpp"

namespace {

using probe::word_pattern;

constexpr std::size_t MiB = std::size_t{1} << 20;

std::atomic<std::uint64_t> wrong{0};
std::atomic<int> failed{0};

void expect(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "races: %s failed with %d\n", what, static_cast<int>(r));
    failed.fetch_add(1);
  }
}

void pause_us(long us) {
  timespec t{0, us * 1000};
  nanosleep(&t, nullptr);
}

std::atomic<int> slow_started{0};

// A sim kernel that writes word_pattern(seed, i) in 32 slices with a pause
// after each, so that it is still writing while another thread moves pages.
// params: words, count, seed
void slow_fill(void** params, void* /*user*/) {
  slow_started.store(1);
  auto* words = *static_cast<std::uint32_t**>(params[0]);
  const auto count = *static_cast<std::size_t*>(params[1]);
  const auto seed = *static_cast<std::uint32_t*>(params[2]);
  constexpr std::size_t kSlices = 32;

  for (std::size_t s = 0; s < kSlices; ++s) {
    for (std::size_t i = count * s / kSlices; i < count * (s + 1) / kSlices; ++i) words[i] = word_pattern(seed, i);
    pause_us(500);
  }
}

// The line preload_test reads, then the mode's verdict: no wrong word and
// no failed call.
int verdict(const char* mode) {
  std::fprintf(stderr, "races: %llu wrong words, %d failed calls\n", static_cast<unsigned long long>(wrong.load()),
               failed.load());
  PROBE_CHECK(wrong.load() == 0);
  PROBE_CHECK(failed.load() == 0);
  return probe::finish(mode);
}

struct Kernels {
  CUfunction fill = nullptr;
  CUfunction slow = nullptr;
  CUfunction check = nullptr;
  Kernels() {
    probe::register_word_kernels(&fill, &check);
    const std::size_t sizes[] = {sizeof(void*), sizeof(std::size_t), sizeof(std::uint32_t)};
    PROBE_CHECK(tidepool_sim_register_kernel(&slow, &slow_fill, nullptr, 3, sizes) == CUDA_SUCCESS);
    PROBE_CHECK(tidepool_sim_set_kernel_extent(slow, 0, 1, 4) == CUDA_SUCCESS);
  }
  CUresult launch(CUfunction f, CUstream stream, CUdeviceptr p, std::size_t bytes, std::uint32_t seed) const {
    auto* words = reinterpret_cast<std::uint32_t*>(p);
    std::size_t count = bytes / 4;
    std::atomic<std::uint64_t>* errors = &wrong;
    void* params[] = {&words, &count, &seed, &errors};
    return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
  }
};

// Words of [p, p + bytes) that differ from word_pattern(seed, i), read with
// a synchronous copy.
std::uint64_t wrong_by_copy(CUdeviceptr p, std::size_t bytes, std::uint32_t seed) {
  std::vector<std::uint32_t> host(bytes / 4);
  expect(cuMemcpyDtoH(host.data(), p, bytes), "cuMemcpyDtoH");
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < host.size(); ++i) bad += host[i] != word_pattern(seed, i) ? 1 : 0;
  return bad;
}

// The two holds of `window`: each thread's handler runs in that thread, as
// the sim raises it, and waits (at most 5 s) for the other thread's step.
std::atomic<int> a_held{0};
std::atomic<int> b_held{0};
std::atomic<int> b_done{0};

bool wait_for(const std::atomic<int>& flag, const std::atomic<int>& or_flag) {
  for (int i = 0; i < 50000; ++i) {
    if (flag.load() != 0 || or_flag.load() != 0) return flag.load() != 0;
    pause_us(100);
  }
  return false;
}

void hold_a(int /*signal*/) {
  a_held.store(1);
  (void)wait_for(b_held, b_done);  // B inside its gate, or B done without one
}

// B holds the pool's lock here, which A's launch takes again once queued:
// B waits for A's kernel to start instead.
void hold_b(int /*signal*/) {
  b_held.store(1);
  (void)wait_for(slow_started, slow_started);
}

int window_route() {
  probe::make_context_current();
  const Kernels k;
  CUcontext context = nullptr;
  PROBE_CHECK(cuCtxGetCurrent(&context) == CUDA_SUCCESS);
  struct sigaction a {};
  a.sa_handler = &hold_a;
  struct sigaction b {};
  b.sa_handler = &hold_b;
  PROBE_CHECK(sigaction(SIGUSR1, &a, nullptr) == 0 && sigaction(SIGUSR2, &b, nullptr) == 0);
  // The budget (conf) holds X and Y: a new 4 MiB block needs one of them out.
  constexpr std::size_t kX = 12 * MiB;
  constexpr std::size_t kY = 4 * MiB;
  CUdeviceptr x = 0;
  CUdeviceptr y = 0;
  expect(cuMemAlloc(&x, kX), "cuMemAlloc X");
  expect(cuMemAlloc(&y, kY), "cuMemAlloc Y");
  expect(k.launch(k.fill, nullptr, y, kY, 9), "fill Y");
  expect(k.launch(k.fill, nullptr, x, kX, 1), "fill X");
  expect(cuCtxSynchronize(), "cuCtxSynchronize");
  std::thread thread_a([&] {
    (void)cuCtxSetCurrent(context);
    CUstream stream = nullptr;
    expect(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    tidepool_sim_raise_in("cuLaunchKernel", 1, SIGUSR1);
    expect(k.launch(k.slow, stream, x, kX, 2), "slow fill X");
    expect(cuStreamSynchronize(stream), "cuStreamSynchronize");
    expect(k.launch(k.check, stream, x, kX, 2), "check X");
    expect(cuStreamSynchronize(stream), "cuStreamSynchronize");
    expect(cuStreamDestroy(stream), "cuStreamDestroy");
  });
  PROBE_CHECK(wait_for(a_held, a_held));
  tidepool_sim_raise_in("cuStreamWaitValue32_v2", 1, SIGUSR2);
  CUdeviceptr z = 0;
  expect(cuMemAlloc(&z, 4 * MiB), "cuMemAlloc Z");
  b_done.store(1);
  thread_a.join();
  // Counted before the signal is cleared, which forgets them too.
  expect(cuCtxSynchronize(), "cuCtxSynchronize");
  const std::uint64_t remaps = tidepool_sim_remap_faults();
  const std::uint64_t unmapped = tidepool_sim_unmapped_faults();
  tidepool_sim_clear_faults();
  const std::uint64_t x_wrong = wrong_by_copy(x, kX, 2);
  const std::uint64_t y_wrong = wrong_by_copy(y, kY, 9);
  wrong.fetch_add(x_wrong + y_wrong);
  std::fprintf(stderr,
               "window: the gate %s held with A's launch in it; %llu remaps under running work, %llu runs reaching "
               "unmapped VA\n",
               b_held.load() != 0 ? "was" : "was not", static_cast<unsigned long long>(remaps),
               static_cast<unsigned long long>(unmapped));
  PROBE_CHECK(remaps == 0);
  PROBE_CHECK(unmapped == 0);
  for (CUdeviceptr p : {x, y, z}) expect(cuMemFree(p), "cuMemFree");
  return verdict("window");
}

// `bytes` from `src` to `dst` as a batch of two halves on `stream`, each
// source read before the call returns.
void copy_in_halves(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
  const std::size_t half = bytes / 2;
  CUdeviceptr dsts[] = {dst, dst + half};
  CUdeviceptr srcs[] = {src, src + half};
  std::size_t sizes[] = {half, bytes - half};
  CUmemcpyAttributes attrs{};
  attrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
  std::size_t first = 0;
  expect(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, &attrs, &first, 1, stream), "cuMemcpyBatchAsync");
}

std::uint64_t wrong_by_batch_copy(CUdeviceptr p, std::size_t bytes, std::uint32_t seed, CUstream stream) {
  std::vector<std::uint32_t> host(bytes / 4);
  copy_in_halves(reinterpret_cast<CUdeviceptr>(host.data()), p, bytes, stream);
  expect(cuStreamSynchronize(stream), "cuStreamSynchronize");
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < host.size(); ++i) bad += host[i] != word_pattern(seed, i) ? 1 : 0;
  return bad;
}

// How a copies route moves bytes between the host and a pool block.
enum class CopyRoute {
  single,    // cuMemcpyHtoD, cuMemcpyDtoH
  batch,     // cuMemcpyBatchAsync, in halves
  arrays,    // through a 1D CUDA array: cuMemcpyHtoA then cuMemcpyAtoD, cuMemcpyDtoA then cuMemcpyAtoH
  batch_3d,  // cuMemcpy3DBatchAsync through a 2D CUDA array, the block's side a pointer operand
};

// A 1D array holds 2 MiB (131072 elements of 16 bytes, the widest 1D array
// a GPU gives): the arrays route moves a block through it in pieces.
constexpr std::size_t kArrayPiece = 2 * MiB;

CUarray make_array(std::size_t width, std::size_t height, CUarray_format format, unsigned channels) {
  const CUDA_ARRAY_DESCRIPTOR d = tidepool::testing::array_descriptor(width, height, format, channels);
  CUarray array = nullptr;
  expect(cuArrayCreate(&array, &d), "cuArrayCreate");
  return array;
}

using tidepool::testing::array_operand;
using tidepool::testing::pointer_operand;

// One copy of a whole 2D array's worth (rows of 4 KiB) on `stream`.
void copy_3d(CUmemcpy3DOperand src, CUmemcpy3DOperand dst, std::size_t bytes, CUstream stream) {
  CUDA_MEMCPY3D_BATCH_OP op{};
  op.src = src;
  op.dst = dst;
  op.extent = CUextent3D{1024, bytes / 4096, 1};
  op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  expect(cuMemcpy3DBatchAsync(1, &op, 0, stream), "cuMemcpy3DBatchAsync");
}

class BlockCopier {
 public:
  BlockCopier(CopyRoute route, std::size_t bytes, CUstream stream) : route_(route), stream_(stream) {
    if (route == CopyRoute::arrays) array_ = make_array(kArrayPiece / 16, 0, CU_AD_FORMAT_UNSIGNED_INT32, 4);
    if (route == CopyRoute::batch_3d) array_ = make_array(1024, bytes / 4096, CU_AD_FORMAT_FLOAT, 1);
  }
  ~BlockCopier() {
    if (array_ != nullptr) expect(cuArrayDestroy(array_), "cuArrayDestroy");
  }
  BlockCopier(const BlockCopier&) = delete;
  BlockCopier& operator=(const BlockCopier&) = delete;

  void to_device(CUdeviceptr block, const std::vector<std::uint32_t>& words) {
    const std::size_t bytes = words.size() * 4;
    switch (route_) {
      case CopyRoute::single:
        expect(cuMemcpyHtoD(block, words.data(), bytes), "cuMemcpyHtoD");
        // From pageable memory the call returns once the source is staged,
        // perhaps before the copy runs; the program's non-blocking stream
        // is not ordered after the legacy stream.
        expect(cuStreamSynchronize(nullptr), "cuStreamSynchronize");
        break;
      case CopyRoute::batch: copy_in_halves(block, reinterpret_cast<CUdeviceptr>(words.data()), bytes, stream_); break;
      case CopyRoute::arrays:
        for (std::size_t at = 0; at < bytes; at += kArrayPiece) {
          expect(cuMemcpyHtoA(array_, 0, reinterpret_cast<const char*>(words.data()) + at, kArrayPiece),
                 "cuMemcpyHtoA");
          expect(cuMemcpyAtoD(block + at, array_, 0, kArrayPiece), "cuMemcpyAtoD");
        }
        // A copy between device memory and an array does not wait on the
        // host: the program's kernels on its own stream must not run first.
        expect(cuStreamSynchronize(nullptr), "cuStreamSynchronize");
        break;
      case CopyRoute::batch_3d:
        copy_3d(pointer_operand(reinterpret_cast<CUdeviceptr>(words.data())), array_operand(array_), bytes, stream_);
        copy_3d(array_operand(array_), pointer_operand(block), bytes, stream_);
        break;
    }
  }

  // Words of `block` that are not `seed`'s pattern.
  std::uint64_t wrong_in(CUdeviceptr block, std::size_t bytes, std::uint32_t seed) {
    std::vector<std::uint32_t> host(bytes / 4);
    switch (route_) {
      case CopyRoute::single: return wrong_by_copy(block, bytes, seed);
      case CopyRoute::batch: return wrong_by_batch_copy(block, bytes, seed, stream_);
      case CopyRoute::arrays:
        for (std::size_t at = 0; at < bytes; at += kArrayPiece) {
          expect(cuMemcpyDtoA(array_, 0, block + at, kArrayPiece), "cuMemcpyDtoA");
          expect(cuMemcpyAtoH(reinterpret_cast<char*>(host.data()) + at, array_, 0, kArrayPiece), "cuMemcpyAtoH");
        }
        break;
      case CopyRoute::batch_3d:
        copy_3d(pointer_operand(block), array_operand(array_), bytes, stream_);
        copy_3d(array_operand(array_), pointer_operand(reinterpret_cast<CUdeviceptr>(host.data())), bytes, stream_);
        expect(cuStreamSynchronize(stream_), "cuStreamSynchronize");
        break;
    }
    std::uint64_t bad = 0;
    for (std::size_t i = 0; i < host.size(); ++i) bad += host[i] != word_pattern(seed, i) ? 1 : 0;
    return bad;
  }

 private:
  CopyRoute route_;
  CUstream stream_;
  CUarray array_ = nullptr;
};

int copies_route(CopyRoute route, const char* name) {
  probe::make_context_current();
  const Kernels k;
  constexpr int kLayers = 6;
  constexpr int kSteps = 12;
  constexpr std::size_t kBlock = 8 * MiB;
  CUstream stream = nullptr;
  expect(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  // Persistent: the input batch and the weights; per step: an activation
  // per layer, kept until the backward pass.
  CUdeviceptr input = 0;
  CUdeviceptr weights = 0;
  expect(cuMemAlloc(&input, kBlock), "cuMemAlloc input");
  expect(cuMemAlloc(&weights, kBlock), "cuMemAlloc weights");
  expect(k.launch(k.fill, stream, weights, kBlock, 77), "fill weights");
  std::vector<std::uint32_t> batch(kBlock / 4);
  BlockCopier copier(route, kBlock, stream);
  for (int step = 0; step < kSteps; ++step) {
    const auto seed = static_cast<std::uint32_t>(1000 + step);
    for (std::size_t i = 0; i < batch.size(); ++i) batch[i] = word_pattern(seed, i);
    // The next batch, once the last step's work is done.
    expect(cuStreamSynchronize(stream), "cuStreamSynchronize");
    copier.to_device(input, batch);
    expect(k.launch(k.check, stream, input, kBlock, seed), "check input");
    std::vector<CUdeviceptr> activations(kLayers, 0);
    for (int l = 0; l < kLayers; ++l) {
      expect(cuMemAllocAsync(&activations[static_cast<std::size_t>(l)], kBlock, stream), "cuMemAllocAsync");
      expect(k.launch(k.check, stream, weights, kBlock, 77), "check weights");
      expect(k.launch(k.fill, stream, activations[static_cast<std::size_t>(l)], kBlock,
                      seed + static_cast<std::uint32_t>(l)),
             "forward");
    }
    for (int l = kLayers - 1; l >= 0; --l) {
      const CUdeviceptr act = activations[static_cast<std::size_t>(l)];
      expect(k.launch(k.check, stream, act, kBlock, seed + static_cast<std::uint32_t>(l)), "backward");
      expect(cuMemFreeAsync(act, stream), "cuMemFreeAsync");
    }
    // The step's loss, read back on the host.
    expect(cuStreamSynchronize(stream), "cuStreamSynchronize");
    wrong.fetch_add(copier.wrong_in(input, kBlock, seed));
    wrong.fetch_add(copier.wrong_in(weights, kBlock, 77));
  }
  expect(cuStreamSynchronize(stream), "cuStreamSynchronize");
  // The program's copies ran on the legacy stream (synchronous ones) or on
  // its own (batches); tidepool's run on streams of its own.
  const bool on_stream = route == CopyRoute::batch || route == CopyRoute::batch_3d;
  std::fprintf(stderr, "host_resident_copies=%llu\n",
               static_cast<unsigned long long>(tidepool_sim_host_resident_copies(on_stream ? stream : nullptr)));
  for (CUdeviceptr p : {input, weights}) expect(cuMemFree(p), "cuMemFree");
  expect(cuStreamDestroy(stream), "cuStreamDestroy");
  return verdict(name);
}

// A global-mode capture on thread A's non-blocking stream while thread B's
// allocation needs room and a launch into the capture names a block on the
// host: tidepool must neither synchronise the context nor touch the
// capturing stream, so the capture ends with a graph.
int capture_route() {
  probe::make_context_current();
  const Kernels k;
  CUcontext context = nullptr;
  PROBE_CHECK(cuCtxGetCurrent(&context) == CUDA_SUCCESS);
  constexpr std::size_t kBlock = 8 * MiB;  // the budget (conf) holds two
  CUdeviceptr x = 0;
  CUdeviceptr y = 0;
  expect(cuMemAlloc(&x, kBlock), "cuMemAlloc X");
  expect(k.launch(k.fill, nullptr, x, kBlock, 1), "fill X");
  expect(cuMemAlloc(&y, kBlock), "cuMemAlloc Y");
  expect(k.launch(k.fill, nullptr, y, kBlock, 2), "fill Y");
  CUdeviceptr z = 0;
  expect(cuMemAlloc(&z, kBlock), "cuMemAlloc Z");  // X (the least recent) goes to the host
  expect(k.launch(k.fill, nullptr, z, kBlock, 3), "fill Z");
  expect(cuCtxSynchronize(), "cuCtxSynchronize");
  std::atomic<int> capturing{0};
  std::atomic<int> allocated{0};
  CUresult ended = CUDA_SUCCESS;
  CUgraph graph = nullptr;
  std::thread thread_a([&] {
    (void)cuCtxSetCurrent(context);
    CUstream stream = nullptr;
    expect(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    expect(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    capturing.store(1);
    (void)wait_for(allocated, allocated);
    // Captured, not run: X's pages are on the host, and stay there.
    expect(k.launch(k.check, stream, x, kBlock, 1), "captured check X");
    ended = cuStreamEndCapture(stream, &graph);
    if (graph != nullptr) expect(cuGraphDestroy(graph), "cuGraphDestroy");
    expect(cuStreamDestroy(stream), "cuStreamDestroy");
  });
  PROBE_CHECK(wait_for(capturing, capturing));
  // Needs room: the pool may not move a page now, so it fails for lack of
  // memory or finds room another way; either way the capture stands.
  CUdeviceptr w = 0;
  const CUresult r = cuMemAllocAsync(&w, kBlock, nullptr);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY) expect(r, "cuMemAllocAsync W");
  allocated.store(1);
  thread_a.join();
  std::fprintf(stderr, "capture: ended with %d, %s graph; the allocation during it %s\n", static_cast<int>(ended),
               graph != nullptr ? "a" : "no", r == CUDA_SUCCESS ? "succeeded" : "ran out of memory");
  PROBE_CHECK(ended == CUDA_SUCCESS && graph != nullptr);
  if (w != 0) expect(cuMemFree(w), "cuMemFree W");
  expect(cuCtxSynchronize(), "cuCtxSynchronize");
  wrong.fetch_add(wrong_by_copy(x, kBlock, 1) + wrong_by_copy(y, kBlock, 2) + wrong_by_copy(z, kBlock, 3));
  for (CUdeviceptr p : {x, y, z}) expect(cuMemFree(p), "cuMemFree");
  return verdict("capture");
}

// A sim kernel that adds 1 to every word. params: words, count
void add_one(void** params, void* /*user*/) {
  auto* words = *static_cast<std::uint32_t**>(params[0]);
  const auto count = *static_cast<std::size_t*>(params[1]);
  for (std::size_t i = 0; i < count; ++i) ++words[i];
}

// add_one, registered with the sim, which learns the words it touches.
CUfunction add_one_kernel() {
  CUfunction add = nullptr;
  const std::size_t sizes[] = {sizeof(void*), sizeof(std::size_t)};
  PROBE_CHECK(tidepool_sim_register_kernel(&add, &add_one, nullptr, 2, sizes) == CUDA_SUCCESS);
  PROBE_CHECK(tidepool_sim_set_kernel_extent(add, 0, 1, 4) == CUDA_SUCCESS);
  return add;
}

// A captured graph whose one kernel adds 1 to every word of X, launched each
// round while other blocks' allocations keep evicting: the blocks a graph
// names must be on the device whenever it runs, and keep their bytes.
int graph_route() {
  probe::make_context_current();
  const Kernels k;
  const CUfunction add = add_one_kernel();
  constexpr std::size_t kBlock = 8 * MiB;  // the budget (conf) holds three
  constexpr int kRounds = 8;
  CUstream stream = nullptr;
  expect(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUdeviceptr x = 0;
  expect(cuMemAlloc(&x, kBlock), "cuMemAlloc X");
  expect(k.launch(k.fill, stream, x, kBlock, 1), "fill X");
  expect(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  auto* words = reinterpret_cast<std::uint32_t*>(x);
  std::size_t count = kBlock / 4;
  void* params[] = {&words, &count};
  expect(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr), "captured add");
  CUgraph graph = nullptr;
  expect(cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
  CUgraphExec exec = nullptr;
  expect(cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
  const std::uint64_t host_reads_before = tidepool_sim_host_resident_launches();
  for (int round = 0; round < kRounds; ++round) {
    CUdeviceptr y = 0;
    CUdeviceptr z = 0;
    CUdeviceptr w = 0;
    expect(cuMemAlloc(&y, kBlock), "cuMemAlloc Y");
    expect(k.launch(k.fill, stream, y, kBlock, 5), "fill Y");
    expect(cuMemAlloc(&z, kBlock), "cuMemAlloc Z");
    expect(k.launch(k.fill, stream, z, kBlock, 6), "fill Z");
    expect(cuMemAlloc(&w, kBlock), "cuMemAlloc W");  // one of the others goes to the host
    expect(k.launch(k.fill, stream, w, kBlock, 7), "fill W");
    expect(cuGraphLaunch(exec, stream), "cuGraphLaunch");
    expect(k.launch(k.check, stream, y, kBlock, 5), "check Y");
    for (CUdeviceptr p : {y, z, w}) expect(cuMemFreeAsync(p, stream), "cuMemFreeAsync");
  }
  expect(cuStreamSynchronize(stream), "cuStreamSynchronize");
  const std::uint64_t host_reads = tidepool_sim_host_resident_launches() - host_reads_before;
  std::vector<std::uint32_t> host(kBlock / 4);
  expect(cuMemcpyDtoH(host.data(), x, kBlock), "cuMemcpyDtoH");
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < host.size(); ++i) bad += host[i] != word_pattern(1, i) + kRounds ? 1 : 0;
  wrong.fetch_add(bad);
  std::fprintf(stderr, "graph: %llu kernel runs read host pages\n", static_cast<unsigned long long>(host_reads));
  expect(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  expect(cuGraphDestroy(graph), "cuGraphDestroy");
  expect(cuMemFree(x), "cuMemFree");
  expect(cuStreamDestroy(stream), "cuStreamDestroy");
  return verdict("graph");
}

// Device 0's primary context made current, and device 1's retained.
struct TwoContexts {
  CUcontext c0 = nullptr;
  CUcontext c1 = nullptr;
  CUdevice d1 = 0;
};
TwoContexts two_contexts() {
  probe::make_context_current();
  TwoContexts t;
  PROBE_CHECK(cuCtxGetCurrent(&t.c0) == CUDA_SUCCESS);
  PROBE_CHECK(cuDeviceGet(&t.d1, 1) == CUDA_SUCCESS);
  PROBE_CHECK(cuDevicePrimaryCtxRetain(&t.c1, t.d1) == CUDA_SUCCESS);
  return t;
}

// Two more blocks of `bytes` on the current device, filled: under a budget
// of two, the least recent block before them goes to the host.
std::vector<CUdeviceptr> fill_two_more(const Kernels& k, std::size_t bytes) {
  std::vector<CUdeviceptr> blocks;
  for (int i = 0; i < 2; ++i) {
    CUdeviceptr p = 0;
    expect(cuMemAlloc(&p, bytes), "cuMemAlloc");
    expect(k.launch(k.fill, nullptr, p, bytes, 9), "fill");
    blocks.push_back(p);
  }
  return blocks;
}

// Block X of `bytes` on the current device, filled with seed 1, then two
// more: under a budget of two, X, the least recent, goes to the host. The
// device is idle again afterwards.
struct EvictedX {
  CUdeviceptr x = 0;
  std::vector<CUdeviceptr> others;
};
EvictedX evicted_x(const Kernels& k, std::size_t bytes) {
  EvictedX e;
  expect(cuMemAlloc(&e.x, bytes), "cuMemAlloc X");
  expect(k.launch(k.fill, nullptr, e.x, bytes, 1), "fill X");
  e.others = fill_two_more(k, bytes);
  expect(cuCtxSynchronize(), "cuCtxSynchronize");
  return e;
}

// Two devices, one host thread (issue 26, item 5): kernels on device 0 read
// and write a block of device 1's pool that device 1's allocations evict.
// Run with TIDEPOOL_SIM_DEVICES=2.
int peer_route() {
  const auto [c0, c1, d1] = two_contexts();
  const Kernels k;
  constexpr std::size_t kBlock = 8 * MiB;  // the budget (conf) holds two per device
  CUdeviceptr own = 0;
  expect(cuMemAlloc(&own, kBlock), "cuMemAlloc on device 0");  // so that device 0 has a pool too
  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  const auto [x, others] = evicted_x(k, kBlock);
  // Device 0's kernels reach device 1's memory only with peer access.
  expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
  expect(cuCtxEnablePeerAccess(c1, 0), "cuCtxEnablePeerAccess");
  std::uint32_t seed = 1;
  for (int round = 0; round < 4; ++round) {
    expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
    CUstream stream = nullptr;
    expect(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    expect(k.launch(k.check, stream, x, kBlock, seed), "check X from device 0");
    ++seed;
    expect(k.launch(k.slow, stream, x, kBlock, seed), "slow fill X from device 0");
    // Device 1 needs room meanwhile.
    expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
    CUdeviceptr p = 0;
    expect(cuMemAlloc(&p, kBlock), "cuMemAlloc on device 1");
    expect(k.launch(k.fill, nullptr, p, kBlock, 9), "fill on device 1");
    expect(cuMemFree(p), "cuMemFree on device 1");
    expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
    expect(cuStreamSynchronize(stream), "cuStreamSynchronize");
    expect(cuStreamDestroy(stream), "cuStreamDestroy");
  }
  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  expect(cuCtxSynchronize(), "cuCtxSynchronize 1");
  wrong.fetch_add(wrong_by_copy(x, kBlock, seed));
  for (CUdeviceptr p : others) expect(cuMemFree(p), "cuMemFree");
  expect(cuMemFree(x), "cuMemFree X");
  expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
  expect(cuMemFree(own), "cuMemFree own");
  std::fprintf(stderr, "peer: %llu remaps under running work, %llu runs reaching unmapped VA\n",
               static_cast<unsigned long long>(tidepool_sim_remap_faults()),
               static_cast<unsigned long long>(tidepool_sim_unmapped_faults()));
  PROBE_CHECK(tidepool_sim_remap_faults() == 0);
  PROBE_CHECK(tidepool_sim_unmapped_faults() == 0);
  PROBE_CHECK(tidepool_sim_access_faults() == 0);
  return verdict("peer");
}

int interleaved_spans_route() {
  const auto [c0, c1, d1] = two_contexts();
  const Kernels k;
  constexpr std::size_t kBlock = 8 * MiB;  // the budget (conf) holds two per device
  CUdeviceptr small0 = 0;
  expect(cuMemAlloc(&small0, 4096), "cuMemAlloc small on device 0");
  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  CUdeviceptr x = 0;
  expect(cuMemAlloc(&x, kBlock), "cuMemAlloc X");
  expect(k.launch(k.fill, nullptr, x, kBlock, 1), "fill X");
  expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
  CUdeviceptr large0 = 0;
  expect(cuMemAlloc(&large0, kBlock), "cuMemAlloc large on device 0");
  const bool between = (x > small0) != (x > large0);
  std::fprintf(stderr, "interleaved_spans: X %s between device 0's segments\n", between ? "lies" : "does not lie");
  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  const std::vector<CUdeviceptr> others = fill_two_more(k, kBlock);  // X, the least recent, goes to the host
  expect(cuCtxSynchronize(), "cuCtxSynchronize 1");
  const std::uint64_t host_reads_before = tidepool_sim_host_resident_launches();
  expect(k.launch(k.check, nullptr, x, kBlock, 1), "check X on device 1");
  expect(cuCtxSynchronize(), "cuCtxSynchronize 1");
  const std::uint64_t host_reads = tidepool_sim_host_resident_launches() - host_reads_before;
  std::fprintf(stderr, "interleaved_spans: %llu launches read host pages\n",
               static_cast<unsigned long long>(host_reads));
  wrong.fetch_add(wrong_by_copy(x, kBlock, 1));
  for (CUdeviceptr p : others) expect(cuMemFree(p), "cuMemFree");
  expect(cuMemFree(x), "cuMemFree X");
  expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
  expect(cuMemFree(large0), "cuMemFree large");
  expect(cuMemFree(small0), "cuMemFree small");
  return verdict("interleaved_spans");
}

int peer_free_route() {
  const auto [c0, c1, d1] = two_contexts();
  const Kernels k;
  constexpr std::size_t kBlock = 8 * MiB;
  expect(cuCtxEnablePeerAccess(c1, 0), "cuCtxEnablePeerAccess");  // device 0 reaches device 1's memory
  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  CUdeviceptr x = 0;
  expect(cuMemAlloc(&x, kBlock), "cuMemAlloc X");
  expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
  expect(k.launch(k.slow, nullptr, x, kBlock, 5), "slow fill of X from device 0");
  expect(cuMemFree(x), "cuMemFree X");
  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  CUdeviceptr y = 0;
  expect(cuMemAlloc(&y, kBlock), "cuMemAlloc Y");
  expect(cuMemsetD8(y, 0x33, kBlock), "cuMemsetD8 Y");
  expect(cuCtxSynchronize(), "cuCtxSynchronize 1");
  expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
  expect(cuCtxSynchronize(), "cuCtxSynchronize 0");
  std::vector<unsigned char> host(kBlock);
  expect(cuMemcpyDtoH(host.data(), y, kBlock), "cuMemcpyDtoH Y");
  const auto overwritten =
      static_cast<std::uint64_t>(std::count_if(host.begin(), host.end(), [](unsigned char b) { return b != 0x33; }));
  std::fprintf(stderr, "peer_free: Y %s X; %llu bytes of Y overwritten\n", y == x ? "took" : "did not take",
               static_cast<unsigned long long>(overwritten));
  wrong.fetch_add(overwritten);
  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  expect(cuMemFree(y), "cuMemFree Y");
  return verdict("peer_free");
}

int peer_after_bring_back_route() {
  const auto [c0, c1, d1] = two_contexts();
  const Kernels k;
  constexpr std::size_t kBlock = 8 * MiB;                         // the budget (conf) holds two per device
  expect(cuCtxEnablePeerAccess(c1, 0), "cuCtxEnablePeerAccess");  // device 0 reaches device 1's memory
  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  const auto [x, others] = evicted_x(k, kBlock);
  expect(cuMemFree(x), "cuMemFree X");
  CUdeviceptr y = 0;
  expect(cuMemAlloc(&y, kBlock), "cuMemAlloc Y");
  expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
  expect(k.launch(k.fill, nullptr, y, kBlock, 2), "fill Y from device 0");
  expect(cuCtxSynchronize(), "cuCtxSynchronize 0");
  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  expect(cuCtxSynchronize(), "cuCtxSynchronize 1");
  const std::uint64_t y_wrong = wrong_by_copy(y, kBlock, 2);
  std::fprintf(stderr, "peer_after_bring_back: Y %s X; %llu words of Y wrong\n", y == x ? "took" : "did not take",
               static_cast<unsigned long long>(y_wrong));
  wrong.fetch_add(y_wrong);
  for (CUdeviceptr p : others) expect(cuMemFree(p), "cuMemFree");
  expect(cuMemFree(y), "cuMemFree Y");
  return verdict("peer_after_bring_back");
}

// Block X of `bytes` on the current device, filled with seed 1, the device
// idle again.
CUdeviceptr filled_x(const Kernels& k, std::size_t bytes) {
  CUdeviceptr x = 0;
  expect(cuMemAlloc(&x, bytes), "cuMemAlloc X");
  expect(k.launch(k.fill, nullptr, x, bytes, 1), "fill X");
  expect(cuCtxSynchronize(), "cuCtxSynchronize");
  return x;
}

// A non-blocking stream of the current context with a slow kernel queued
// first (over pinned host memory, so that no pool is asked for any): work
// queued on it next runs some 16 ms later.
struct SlowStream {
  CUstream stream = nullptr;
  void* scratch = nullptr;
};
SlowStream slow_stream(const Kernels& k) {
  SlowStream s;
  expect(cuMemAllocHost(&s.scratch, 4096), "cuMemAllocHost");
  expect(cuStreamCreate(&s.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  expect(k.launch(k.slow, s.stream, reinterpret_cast<CUdeviceptr>(s.scratch), 4096, 7), "slow kernel");
  return s;
}
void destroy(const SlowStream& s) {
  expect(cuStreamDestroy(s.stream), "cuStreamDestroy");
  if (s.scratch != nullptr) expect(cuMemFreeHost(s.scratch), "cuMemFreeHost");
}

int copy_from_poolless_device_route() {
  const auto [c0, c1, d1] = two_contexts();
  const Kernels k;
  constexpr std::size_t kBlock = 8 * MiB;  // the budget (conf) holds two
  const CUdeviceptr x = filled_x(k, kBlock);
  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  void* host = nullptr;
  expect(cuMemAllocHost(&host, kBlock), "cuMemAllocHost");
  const SlowStream slow = slow_stream(k);  // device 1 gets no pool
  CUstream stream = slow.stream;
  expect(cuMemcpyDtoHAsync(host, x, kBlock, stream), "cuMemcpyDtoHAsync of X on device 1");
  expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
  const std::vector<CUdeviceptr> others = fill_two_more(k, kBlock);  // room taken before the copy runs
  expect(cuCtxSynchronize(), "cuCtxSynchronize 0");
  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  expect(cuStreamSynchronize(stream), "cuStreamSynchronize on device 1");
  const std::uint64_t host_reads = tidepool_sim_host_resident_copies(stream);
  const auto* words = static_cast<const std::uint32_t*>(host);
  std::uint64_t copied_wrong = 0;
  for (std::size_t i = 0; host != nullptr && i < kBlock / 4; ++i)
    copied_wrong += words[i] != word_pattern(1, i) ? 1 : 0;
  std::fprintf(stderr, "copy_from_poolless_device: %llu copies reached host pages, %llu words copied wrong\n",
               static_cast<unsigned long long>(host_reads), static_cast<unsigned long long>(copied_wrong));
  wrong.fetch_add(copied_wrong);
  PROBE_CHECK(tidepool_sim_remap_faults() == 0);
  destroy(slow);
  if (host != nullptr) expect(cuMemFreeHost(host), "cuMemFreeHost");
  expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
  wrong.fetch_add(wrong_by_copy(x, kBlock, 1));
  for (CUdeviceptr p : others) expect(cuMemFree(p), "cuMemFree");
  expect(cuMemFree(x), "cuMemFree X");
  return verdict("copy_from_poolless_device");
}

int created_context_route() {
  probe::make_context_current();
  CUcontext primary = nullptr;
  PROBE_CHECK(cuCtxGetCurrent(&primary) == CUDA_SUCCESS);
  const Kernels k;
  constexpr std::size_t kBlock = 8 * MiB;  // the budget (conf) holds two
  const CUdeviceptr x = filled_x(k, kBlock);
  CUcontext mine = nullptr;
  expect(cuCtxCreate(&mine, nullptr, 0, 0), "cuCtxCreate on device 0");
  const std::uint64_t host_reads_before = tidepool_sim_host_resident_launches();
  const SlowStream slow = slow_stream(k);
  CUstream stream = slow.stream;
  expect(k.launch(k.check, stream, x, kBlock, 1), "check X in the created context");
  expect(cuCtxSetCurrent(primary), "cuCtxSetCurrent primary");
  const std::vector<CUdeviceptr> others = fill_two_more(k, kBlock);  // room taken before the check runs
  expect(cuCtxSetCurrent(mine), "cuCtxSetCurrent created");
  expect(cuStreamSynchronize(stream), "cuStreamSynchronize");
  const std::uint64_t host_reads = tidepool_sim_host_resident_launches() - host_reads_before;
  std::fprintf(stderr, "created_context: %llu launches read host pages\n", static_cast<unsigned long long>(host_reads));
  PROBE_CHECK(tidepool_sim_remap_faults() == 0);
  destroy(slow);
  expect(cuCtxSetCurrent(primary), "cuCtxSetCurrent primary");
  expect(cuCtxDestroy(mine), "cuCtxDestroy");
  expect(cuCtxSetCurrent(primary), "cuCtxSetCurrent primary");
  wrong.fetch_add(wrong_by_copy(x, kBlock, 1));
  for (CUdeviceptr p : others) expect(cuMemFree(p), "cuMemFree");
  expect(cuMemFree(x), "cuMemFree X");
  return verdict("created_context");
}

// Launches `f` on `block` from the current context and synchronises it:
// whether the kernel faulted for want of access (the sim's fault count
// grew; its sticky error is then cleared for the next step).
bool faults(const Kernels& k, CUfunction f, CUdeviceptr block, std::size_t bytes, std::uint32_t seed) {
  const std::uint64_t before = tidepool_sim_access_faults();
  expect(k.launch(f, nullptr, block, bytes, seed), "launch");
  const CUresult synced = cuCtxSynchronize();
  const bool faulted = tidepool_sim_access_faults() > before;
  PROBE_CHECK(faulted == (synced == CUDA_ERROR_ILLEGAL_ADDRESS));
  if (faulted) tidepool_sim_clear_faults();
  return faulted;
}

int peer_access_route() {
  const auto [c0, c1, d1] = two_contexts();
  const Kernels k;
  int can = 0;
  PROBE_CHECK(cuDeviceCanAccessPeer(&can, d1, 0) == CUDA_SUCCESS && can == 1);
  constexpr std::size_t kBlock = 8 * MiB;  // a budget of 16 MiB (conf) holds two
  CUdeviceptr a = 0;
  expect(cuMemAlloc(&a, kBlock), "cuMemAlloc A on device 0");
  expect(k.launch(k.fill, nullptr, a, kBlock, 1), "fill A");
  expect(cuCtxSynchronize(), "cuCtxSynchronize 0");

  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  const bool before_enable = faults(k, k.check, a, kBlock, 1);
  expect(cuCtxEnablePeerAccess(c0, 0), "cuCtxEnablePeerAccess");
  PROBE_CHECK(cuCtxEnablePeerAccess(c0, 0) == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  const bool enabled_old = faults(k, k.check, a, kBlock, 1) || faults(k, k.fill, a, kBlock, 2);

  // Blocks made after the enable, and A pushed to the host by them.
  expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
  CUdeviceptr b = 0;
  CUdeviceptr c = 0;
  expect(cuMemAlloc(&b, kBlock), "cuMemAlloc B on device 0");
  expect(k.launch(k.fill, nullptr, b, kBlock, 3), "fill B");
  expect(cuMemAlloc(&c, kBlock), "cuMemAlloc C on device 0");
  expect(k.launch(k.fill, nullptr, c, kBlock, 4), "fill C");
  expect(cuCtxSynchronize(), "cuCtxSynchronize 0");
  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  const bool enabled_new = faults(k, k.check, b, kBlock, 3) || faults(k, k.fill, b, kBlock, 5) ||
                           faults(k, k.check, a, kBlock, 2) || faults(k, k.check, c, kBlock, 4);

  expect(cuCtxDisablePeerAccess(c0), "cuCtxDisablePeerAccess");
  PROBE_CHECK(cuCtxDisablePeerAccess(c0) == CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  const bool after_disable = faults(k, k.check, b, kBlock, 5) && faults(k, k.fill, a, kBlock, 7);

  expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
  wrong.fetch_add(wrong_by_copy(a, kBlock, 2) + wrong_by_copy(b, kBlock, 5) + wrong_by_copy(c, kBlock, 4));
  for (CUdeviceptr p : {a, b, c}) expect(cuMemFree(p), "cuMemFree");

  // A stream-ordered block of device 0's default memory pool, which device 1
  // reaches once the pool's access names it (cudaMemPoolSetAccess).
  CUdeviceptr m = 0;
  expect(cuMemAllocAsync(&m, kBlock, nullptr), "cuMemAllocAsync M on device 0");
  expect(k.launch(k.fill, nullptr, m, kBlock, 8), "fill M");
  expect(cuCtxSynchronize(), "cuCtxSynchronize 0");
  CUmemoryPool pool = nullptr;
  expect(cuDeviceGetDefaultMemPool(&pool, 0), "cuDeviceGetDefaultMemPool");
  CUmemAccessDesc one{};
  one.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  one.location.id = 1;
  one.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  expect(cuCtxSetCurrent(c1), "cuCtxSetCurrent 1");
  const bool pool_closed = faults(k, k.check, m, kBlock, 8);
  expect(cuMemPoolSetAccess(pool, &one, 1), "cuMemPoolSetAccess open");
  const bool pool_open = faults(k, k.check, m, kBlock, 8) || faults(k, k.fill, m, kBlock, 9);
  one.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  expect(cuMemPoolSetAccess(pool, &one, 1), "cuMemPoolSetAccess close");
  const bool pool_closed_again = faults(k, k.check, m, kBlock, 9);

  expect(cuCtxSetCurrent(c0), "cuCtxSetCurrent 0");
  wrong.fetch_add(wrong_by_copy(m, kBlock, 9));
  expect(cuMemFreeAsync(m, nullptr), "cuMemFreeAsync M");
  expect(cuCtxSynchronize(), "cuCtxSynchronize 0");
  std::fprintf(stderr,
               "peer_access: faults before enable %d, while enabled %d and %d, after disable %d; "
               "memory pool closed %d, open %d, closed again %d\n",
               before_enable ? 1 : 0, enabled_old ? 1 : 0, enabled_new ? 1 : 0, after_disable ? 1 : 0,
               pool_closed ? 1 : 0, pool_open ? 1 : 0, pool_closed_again ? 1 : 0);
  PROBE_CHECK(before_enable && !enabled_old && !enabled_new && after_disable);
  PROBE_CHECK(pool_closed && !pool_open && pool_closed_again);
  return verdict("peer_access");
}

// A graph G2 = {kernel: add 1 to X; child graph G1 = {copy S -> D; set M}},
// launched each round while other blocks' allocations keep evicting. No
// launch or copy the hooks see names S, D or M after instantiation.
int graph_nodes_route() {
  probe::make_context_current();
  const Kernels k;
  const CUfunction add = add_one_kernel();
  constexpr std::size_t kBlock = 4 * MiB;  // the budget (conf) holds six
  constexpr int kRounds = 6;
  constexpr unsigned char kSetTo = 0x5a;
  CUstream stream = nullptr;
  expect(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUdeviceptr x = 0;
  CUdeviceptr src = 0;
  CUdeviceptr dst = 0;
  CUdeviceptr set = 0;
  for (CUdeviceptr* p : {&x, &src, &dst, &set}) expect(cuMemAlloc(p, kBlock), "cuMemAlloc");
  expect(k.launch(k.fill, stream, x, kBlock, 1), "fill X");
  expect(k.launch(k.fill, stream, src, kBlock, 2), "fill S");
  expect(cuMemsetD8Async(dst, 0, kBlock, stream), "clear D");
  expect(cuMemsetD8Async(set, 0, kBlock, stream), "clear M");

  CUgraph inner = nullptr;
  expect(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture inner");
  expect(cuMemcpyDtoDAsync(dst, src, kBlock, stream), "captured copy");
  expect(cuMemsetD8Async(set, kSetTo, kBlock, stream), "captured set");
  expect(cuStreamEndCapture(stream, &inner), "cuStreamEndCapture inner");
  CUgraph outer = nullptr;
  expect(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture outer");
  auto* words = reinterpret_cast<std::uint32_t*>(x);
  std::size_t count = kBlock / 4;
  void* params[] = {&words, &count};
  expect(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr), "captured add");
  expect(cuStreamEndCapture(stream, &outer), "cuStreamEndCapture outer");
  CUgraphNode child = nullptr;
  expect(cuGraphAddChildGraphNode(&child, outer, nullptr, 0, inner), "cuGraphAddChildGraphNode");
  CUgraphExec exec = nullptr;
  expect(cuGraphInstantiateWithFlags(&exec, outer, 0), "cuGraphInstantiateWithFlags");
  expect(cuStreamSynchronize(stream), "cuStreamSynchronize");

  const std::uint64_t host_copies_before = tidepool_sim_host_resident_graph_copies();
  for (int round = 0; round < kRounds; ++round) {
    std::vector<CUdeviceptr> others(5);
    for (std::size_t i = 0; i < others.size(); ++i) {
      expect(cuMemAlloc(&others[i], kBlock), "cuMemAlloc other");  // the last ones push older blocks out
      expect(k.launch(k.fill, stream, others[i], kBlock, 10 + static_cast<std::uint32_t>(i)), "fill other");
    }
    expect(cuGraphLaunch(exec, stream), "cuGraphLaunch");
    expect(k.launch(k.check, stream, others[0], kBlock, 10), "check other");
    for (CUdeviceptr p : others) expect(cuMemFreeAsync(p, stream), "cuMemFreeAsync");
  }
  expect(cuStreamSynchronize(stream), "cuStreamSynchronize");
  const std::uint64_t host_copies = tidepool_sim_host_resident_graph_copies() - host_copies_before;
  // D holds S's words; M the set byte; X its fill plus one a round.
  expect(k.launch(k.check, stream, dst, kBlock, 2), "check D");
  expect(cuStreamSynchronize(stream), "cuStreamSynchronize");
  std::vector<std::uint32_t> host(kBlock / 4);
  expect(cuMemcpyDtoH(host.data(), x, kBlock), "cuMemcpyDtoH X");
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < host.size(); ++i) bad += host[i] != word_pattern(1, i) + kRounds ? 1 : 0;
  std::vector<unsigned char> bytes(kBlock);
  expect(cuMemcpyDtoH(bytes.data(), set, kBlock), "cuMemcpyDtoH M");
  for (unsigned char b : bytes) bad += b != kSetTo ? 1 : 0;
  wrong.fetch_add(bad);
  std::fprintf(stderr, "graph_nodes: %llu graph copies and sets touched host pages\n",
               static_cast<unsigned long long>(host_copies));
  expect(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  expect(cuGraphDestroy(outer), "cuGraphDestroy outer");
  expect(cuGraphDestroy(inner), "cuGraphDestroy inner");
  for (CUdeviceptr p : {x, src, dst, set}) expect(cuMemFree(p), "cuMemFree");
  expect(cuStreamDestroy(stream), "cuStreamDestroy");
  return verdict("graph_nodes");
}

}  // namespace

int idle_stream_route() {
  probe::make_context_current();
  const Kernels k;
  constexpr std::size_t kBlock = 8 * MiB;
  CUstream s = nullptr;
  expect(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  // A first barrier joins S (new streams count as having work), and leaves
  // it with nothing queued since.
  CUdeviceptr first = 0;
  expect(cuMemAlloc(&first, kBlock), "cuMemAlloc");
  expect(cuMemsetD8Async(first, 0x11, kBlock, s), "cuMemsetD8Async on S");
  expect(cuStreamSynchronize(s), "cuStreamSynchronize S");
  expect(cuMemFree(first), "cuMemFree");
  CUdeviceptr x = 0;
  expect(cuMemAlloc(&x, kBlock), "cuMemAlloc X");
  expect(k.launch(k.slow, nullptr, x, kBlock, 5), "slow fill of X on the legacy stream");
  expect(cuMemFree(x), "cuMemFree X");
  const std::uint64_t before = tidepool_sim_call_count("cuStreamWaitEvent");
  CUdeviceptr y = 0;
  expect(cuMemAlloc(&y, kBlock), "cuMemAlloc Y");
  const std::uint64_t at_barrier = tidepool_sim_call_count("cuStreamWaitEvent");
  expect(cuMemsetD8Async(y, 0x33, kBlock, s), "cuMemsetD8Async Y on S");
  const std::uint64_t at_set = tidepool_sim_call_count("cuStreamWaitEvent");
  expect(cuCtxSynchronize(), "cuCtxSynchronize");
  std::vector<unsigned char> host(kBlock);
  expect(cuMemcpyDtoH(host.data(), y, kBlock), "cuMemcpyDtoH Y");
  const auto overwritten =
      static_cast<std::uint64_t>(std::count_if(host.begin(), host.end(), [](unsigned char b) { return b != 0x33; }));
  std::fprintf(stderr,
               "idle_stream: Y %s X; %llu waits queued by the barrier, %llu by the set; %llu bytes of Y overwritten\n",
               y == x ? "took" : "did not take", static_cast<unsigned long long>(at_barrier - before),
               static_cast<unsigned long long>(at_set - at_barrier), static_cast<unsigned long long>(overwritten));
  wrong.fetch_add(overwritten);
  expect(cuMemFree(y), "cuMemFree Y");
  expect(cuStreamDestroy(s), "cuStreamDestroy");
  return verdict("idle_stream");
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "window") == 0) return window_route();
  if (std::strcmp(mode, "copies") == 0) return copies_route(CopyRoute::single, mode);
  if (std::strcmp(mode, "batch_copies") == 0) return copies_route(CopyRoute::batch, mode);
  if (std::strcmp(mode, "array_copies") == 0) return copies_route(CopyRoute::arrays, mode);
  if (std::strcmp(mode, "batch_3d_copies") == 0) return copies_route(CopyRoute::batch_3d, mode);
  if (std::strcmp(mode, "capture") == 0) return capture_route();
  if (std::strcmp(mode, "graph") == 0) return graph_route();
  if (std::strcmp(mode, "graph_nodes") == 0) return graph_nodes_route();
  if (std::strcmp(mode, "peer") == 0) return peer_route();
  if (std::strcmp(mode, "peer_access") == 0) return peer_access_route();
  if (std::strcmp(mode, "interleaved_spans") == 0) return interleaved_spans_route();
  if (std::strcmp(mode, "peer_free") == 0) return peer_free_route();
  if (std::strcmp(mode, "peer_after_bring_back") == 0) return peer_after_bring_back_route();
  if (std::strcmp(mode, "copy_from_poolless_device") == 0) return copy_from_poolless_device_route();
  if (std::strcmp(mode, "created_context") == 0) return created_context_route();
  if (std::strcmp(mode, "idle_stream") == 0) return idle_stream_route();
  std::fprintf(
      stderr,
      "usage: probe_races window|copies|capture|graph|graph_nodes|peer|peer_access|interleaved_spans|peer_free|"
      "peer_after_bring_back|copy_from_poolless_device|created_context|idle_stream [report-path]\n");
  return 2;
}
