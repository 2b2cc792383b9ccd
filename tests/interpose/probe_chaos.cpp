// A random workload of several host threads under a tight budget, for the
// residency property test (preload_test's RandomThreads...): every thread
// owns its blocks and its stream (the legacy stream, a blocking, a
// non-blocking or the per-thread default stream) and, in an order drawn
// from a fixed seed, allocates, frees (cudaFree-style and stream-ordered),
// writes its blocks with kernels, memsets and copies from the host or from
// another of its blocks, and reads them back with kernels and with copies to
// the host after synchronising its stream. Other threads' allocations keep
// evicting its blocks meanwhile. Every byte is checked through the device
// path (kernels and cuMemcpy*, never a host pointer), so a word lost to a
// move racing a kernel or a copy is counted.
//
// Usage: probe_chaos SEED [report-path]. PROBE_THREADS (default 4) and
// PROBE_OPS (operations per thread, default 300) size the run, PROBE_SIZES=small
// makes blocks that share pages with their neighbours; with
// PROBE_DEVICES=2 the threads take the devices in turn (each thread's blocks
// on its own device); with PROBE_PEER=1 as well, every device has peer
// access to the other, and a third of a thread's blocks are allocated on the
// other device (cudaFree-style) and used from its own.
// stderr's last line: "chaos: W wrong words, F failed calls, O out of memory".
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "probe_linked_common.hpp"
#include "sim/sim_control.h"

extern "C" CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned shared, CUstream stream, void** params, void** extra);

namespace {

using probe::word_pattern;

constexpr std::size_t MiB = std::size_t{1} << 20;

// What a block must hold: word_pattern(seed, i), or every byte `seed & 0xff`
// after a memset.
struct Expected {
  std::uint32_t seed = 0;
  bool constant = false;
  [[nodiscard]] std::uint32_t word(std::size_t i) const {
    if (!constant) return word_pattern(seed, i);
    return (seed & 0xffu) * 0x01010101u;
  }
};

// A sim kernel. params: words, count, seed, constant, errors
void check_expected(void** params, void* /*user*/) {
  const auto* words = *static_cast<const std::uint32_t**>(params[0]);
  const auto count = *static_cast<std::size_t*>(params[1]);
  const Expected expected{*static_cast<std::uint32_t*>(params[2]), *static_cast<bool*>(params[3])};
  auto* errors = *static_cast<std::atomic<std::uint64_t>**>(params[4]);
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) bad += words[i] != expected.word(i) ? 1 : 0;
  errors->fetch_add(bad);
}

enum class StreamKind { legacy, blocking, non_blocking, per_thread };

struct Shared {
  bool small = false;
  bool peer = false;
  std::vector<CUcontext> contexts;  // one per device, workers spread over them
  CUfunction fill = nullptr;
  CUfunction check = nullptr;
  std::atomic<std::uint64_t> wrong{0};
  std::atomic<int> failed{0};
  std::atomic<int> out_of_memory{0};
};

struct OwnedBlock {
  CUdeviceptr address = 0;
  std::size_t bytes = 0;
  Expected expected;
  bool on_peer = false;  // allocated on the other device
};

class Worker {
 public:
  Worker(Shared& shared, CUcontext context, unsigned seed, int ops)
      : shared_(shared), context_(context), rng_(seed), ops_(ops) {}

  void run() {
    (void)cuCtxSetCurrent(context_);
    kind_ = static_cast<StreamKind>(rng_() % 4);
    if (kind_ == StreamKind::blocking || kind_ == StreamKind::non_blocking) {
      const unsigned flags = kind_ == StreamKind::blocking ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING;
      expect(cuStreamCreate(&stream_, flags));
    }
    for (int op = 0; op < ops_; ++op) step();
    for (OwnedBlock& b : blocks_) check_by_kernel(b);
    for (OwnedBlock& b : blocks_) check_by_copy(b);
    while (!blocks_.empty()) free_block(blocks_.size() - 1);
    expect(sync());
    if (stream_ != nullptr) expect(cuStreamDestroy(stream_));
  }

 private:
  void expect(CUresult r) {
    if (r != CUDA_SUCCESS) {
      std::fprintf(stderr, "chaos: a call failed with %d\n", static_cast<int>(r));
      shared_.failed.fetch_add(1);
    }
  }
  CUresult sync() { return cuStreamSynchronize(async_stream()); }
  CUresult launch(CUfunction f, void** params) {
    if (kind_ == StreamKind::per_thread) return cuLaunchKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
    return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream_, params, nullptr);
  }
  // The stream the thread's async calls go to (the per-thread default
  // stream by its handle).
  [[nodiscard]] CUstream async_stream() const {
    return kind_ == StreamKind::per_thread ? CU_STREAM_PER_THREAD : stream_;
  }

  void step() {
    const unsigned roll = rng_() % 100;
    if (blocks_.empty() || (roll < 14 && blocks_.size() < 4)) return allocate();
    OwnedBlock& b = blocks_[rng_() % blocks_.size()];
    if (roll < 30) return fill_by_kernel(b);
    if (roll < 48) return check_by_kernel(b);
    if (roll < 56) return fill_by_memset(b);
    if (roll < 64) return fill_by_copy(b);
    if (roll < 72) return check_by_copy(b);
    if (roll < 80) return copy_from_sibling(b);
    if (roll < 92) return free_block(static_cast<std::size_t>(&b - blocks_.data()));
    expect(sync());
  }

  void allocate() {
    // Blocks of whole pages and more, or (PROBE_SIZES=small) blocks that
    // share pages with their neighbours.
    static constexpr std::size_t kLarge[] = {2 * MiB, 4 * MiB, 6 * MiB, 8 * MiB};
    static constexpr std::size_t kSmall[] = {512 * 1024, 3 * MiB / 2, 3 * MiB, 5 * MiB};
    OwnedBlock b;
    const std::size_t* sizes = shared_.small ? kSmall : kLarge;
    b.bytes = sizes[rng_() % 4];
    if (rng_() % 2 != 0) b.bytes += 4096;
    b.on_peer = shared_.peer && rng_() % 3 == 0;
    const bool ordered = !b.on_peer && rng_() % 2 == 0;
    if (b.on_peer) expect(cuCtxSetCurrent(peer_context()));
    const CUresult r = ordered ? cuMemAllocAsync(&b.address, b.bytes, async_stream()) : cuMemAlloc(&b.address, b.bytes);
    if (b.on_peer) expect(cuCtxSetCurrent(context_));
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      shared_.out_of_memory.fetch_add(1);
      return;
    }
    expect(r);
    if (r != CUDA_SUCCESS) return;
    blocks_.push_back(b);
    fill_by_kernel(blocks_.back());
  }

  void fill_by_kernel(OwnedBlock& b) {
    b.expected = Expected{static_cast<std::uint32_t>(rng_()), false};
    auto* words = reinterpret_cast<std::uint32_t*>(b.address);
    std::size_t count = b.bytes / 4;
    std::uint32_t seed = b.expected.seed;
    void* params[] = {&words, &count, &seed};
    expect(launch(shared_.fill, params));
  }

  void check_by_kernel(OwnedBlock& b) {
    auto* words = reinterpret_cast<std::uint32_t*>(b.address);
    std::size_t count = b.bytes / 4;
    std::uint32_t seed = b.expected.seed;
    bool constant = b.expected.constant;
    std::atomic<std::uint64_t>* errors = &shared_.wrong;
    void* params[] = {&words, &count, &seed, &constant, &errors};
    expect(launch(shared_.check, params));
  }

  void fill_by_memset(OwnedBlock& b) {
    b.expected = Expected{static_cast<std::uint32_t>(rng_()), true};
    expect(cuMemsetD8Async(b.address, static_cast<unsigned char>(b.expected.seed & 0xffu), b.bytes, async_stream()));
  }

  // The next batch, copied in from the host once the stream's earlier work
  // is done (a synchronous copy, ordered as the legacy stream is). From
  // pageable memory it returns once the source is staged, the copy perhaps
  // still queued, and a non-blocking stream is not ordered after the legacy
  // stream (blocking streams and the per-thread stream are): a thread on
  // one waits for the copy. (No event: TIDEPOOL_SIM_FAULTS counts every
  // caller's cuEventRecord.)
  void fill_by_copy(OwnedBlock& b) {
    b.expected = Expected{static_cast<std::uint32_t>(rng_()), false};
    host_.resize(b.bytes / 4);
    for (std::size_t i = 0; i < host_.size(); ++i) host_[i] = b.expected.word(i);
    expect(sync());
    expect(cuMemcpyHtoD(b.address, host_.data(), b.bytes));
    if (kind_ == StreamKind::non_blocking) expect(cuStreamSynchronize(CU_STREAM_LEGACY));
  }

  // The stream synchronised, then the block read back with a synchronous
  // copy: what a program does to print a loss.
  void check_by_copy(const OwnedBlock& b) {
    host_.assign(b.bytes / 4, 0);
    expect(sync());
    expect(cuMemcpyDtoH(host_.data(), b.address, b.bytes));
    std::uint64_t bad = 0;
    for (std::size_t i = 0; i < host_.size(); ++i) bad += host_[i] != b.expected.word(i) ? 1 : 0;
    shared_.wrong.fetch_add(bad);
  }

  void copy_from_sibling(OwnedBlock& b) {
    for (const OwnedBlock& other : blocks_) {
      if (&other == &b || other.bytes != b.bytes) continue;
      expect(cuMemcpyDtoDAsync(b.address, other.address, b.bytes, async_stream()));
      b.expected = other.expected;
      return;
    }
    fill_by_kernel(b);
  }

  void free_block(std::size_t index) {
    const OwnedBlock b = blocks_[index];
    blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(index));
    const bool ordered = !b.on_peer && rng_() % 2 == 0;
    expect(ordered ? cuMemFreeAsync(b.address, async_stream()) : cuMemFree(b.address));
  }

  [[nodiscard]] CUcontext peer_context() const {
    return shared_.contexts[0] == context_ ? shared_.contexts[1] : shared_.contexts[0];
  }

  Shared& shared_;
  CUcontext context_;
  std::mt19937 rng_;
  int ops_;
  StreamKind kind_ = StreamKind::legacy;
  CUstream stream_ = nullptr;
  std::vector<OwnedBlock> blocks_;
  std::vector<std::uint32_t> host_;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const unsigned seed = argc > 1 ? static_cast<unsigned>(std::strtoul(argv[1], nullptr, 10)) : 1;
  const int threads = env_int("PROBE_THREADS", 4);
  const int ops = env_int("PROBE_OPS", 300);
  const int devices = env_int("PROBE_DEVICES", 1);
  probe::make_context_current();
  Shared shared;
  const char* sizes = std::getenv("PROBE_SIZES");
  shared.small = sizes != nullptr && std::strcmp(sizes, "small") == 0;
  shared.peer = devices == 2 && env_int("PROBE_PEER", 0) != 0;
  for (int d = 0; d < devices; ++d) {
    CUdevice device = 0;
    CUcontext context = nullptr;
    PROBE_CHECK(cuDeviceGet(&device, d) == CUDA_SUCCESS);
    PROBE_CHECK(cuDevicePrimaryCtxRetain(&context, device) == CUDA_SUCCESS);
    shared.contexts.push_back(context);
  }
  if (shared.peer) {
    for (int d = 0; d < 2; ++d) {
      PROBE_CHECK(cuCtxSetCurrent(shared.contexts[static_cast<std::size_t>(d)]) == CUDA_SUCCESS);
      PROBE_CHECK(cuCtxEnablePeerAccess(shared.contexts[static_cast<std::size_t>(1 - d)], 0) == CUDA_SUCCESS);
    }
  }
  const std::size_t fill_sizes[] = {sizeof(void*), sizeof(std::size_t), sizeof(std::uint32_t)};
  const std::size_t check_sizes[] = {sizeof(void*), sizeof(std::size_t), sizeof(std::uint32_t), sizeof(bool),
                                     sizeof(void*)};
  PROBE_CHECK(tidepool_sim_register_kernel(&shared.fill, &probe::fill_words, nullptr, 3, fill_sizes) == CUDA_SUCCESS);
  PROBE_CHECK(tidepool_sim_register_kernel(&shared.check, &check_expected, nullptr, 5, check_sizes) == CUDA_SUCCESS);
  // Each touches `count` words from its pointer: the sim's remap check sees
  // the whole block.
  PROBE_CHECK(tidepool_sim_set_kernel_extent(shared.fill, 0, 1, 4) == CUDA_SUCCESS);
  PROBE_CHECK(tidepool_sim_set_kernel_extent(shared.check, 0, 1, 4) == CUDA_SUCCESS);
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    CUcontext context = shared.contexts[static_cast<std::size_t>(t) % shared.contexts.size()];
    pool.emplace_back([&shared, context, seed, t, ops] {
      Worker(shared, context, seed * 7919u + static_cast<unsigned>(t), ops).run();
    });
  }
  for (std::thread& t : pool) t.join();
  for (CUcontext context : shared.contexts) {
    PROBE_CHECK(cuCtxSetCurrent(context) == CUDA_SUCCESS);
    PROBE_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
  }
  std::fprintf(stderr,
               "chaos: %llu wrong words, %d failed calls, %d out of memory; %llu remaps under running work, %llu runs "
               "reaching unmapped VA\n",
               static_cast<unsigned long long>(shared.wrong.load()), shared.failed.load(), shared.out_of_memory.load(),
               static_cast<unsigned long long>(tidepool_sim_remap_faults()),
               static_cast<unsigned long long>(tidepool_sim_unmapped_faults()));
  PROBE_CHECK(shared.wrong.load() == 0);
  PROBE_CHECK(tidepool_sim_remap_faults() == 0);
  PROBE_CHECK(tidepool_sim_unmapped_faults() == 0);
  PROBE_CHECK(shared.failed.load() == 0);
  return probe::finish("chaos");
}
