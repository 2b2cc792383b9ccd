// A program that does what a native program may do and a hook must survive,
// for the preload tests of hostile input. Linked the ordinary way against
// libcuda.so.1 (the sim). Each mode checks what it can see from inside; the
// test around it checks the report, the log and the exit status.
//   extra_launch  kernels launched with their parameters packed in one
//                 buffer (cuLaunchKernel's `extra`), touching blocks four
//                 times the budget when run with device_limit:16MiB,evict:on;
//                 then packed launches whose buffer is smaller than the size
//                 they claim (1 MiB, 1 TiB), placed so that a read past the
//                 buffer faults: the driver refuses them, and so must the
//                 preload, without reading a byte past the buffer
//   sigint_pool   a SIGINT whose handler calls exit() lands while the
//                 allocation it interrupts is inside the pool (the sim raises
//                 it as cuMemCreate is entered, which the pool calls under
//                 its lock)
//   sigint_native the same signal as cuMemAlloc_v2 is entered: what the
//                 program does without tidepool
#include <cuda.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "probe_linked_common.hpp"
#include "sim/sim_control.h"

namespace {

using probe::check_words;
using probe::fill_words;
using probe::make_context_current;

constexpr std::size_t MiB = std::size_t{1} << 20;

// The packed forms: each parameter at its natural alignment. The buffer's
// size is the end of the last parameter (20 and 32 bytes), not sizeof.
struct PackedFill {
  std::uint32_t* words;
  std::size_t count;
  std::uint32_t seed;
};
struct PackedCheck {
  std::uint32_t* words;
  std::size_t count;
  std::uint32_t seed;
  std::atomic<std::uint64_t>* errors;
};

CUresult launch_packed(CUfunction f, CUstream stream, void* buffer, std::size_t size) {
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, extra);
}

int extra_launch_route() {
  make_context_current();
  constexpr std::size_t kBlock = 8 * MiB;
  constexpr std::size_t kBlocks = 8;  // 64 MiB live
  CUfunction fill_kernel = nullptr;
  CUfunction check_kernel = nullptr;
  const std::size_t sizes[] = {sizeof(void*), sizeof(std::size_t), sizeof(std::uint32_t), sizeof(void*)};
  PROBE_CHECK(tidepool_sim_register_kernel(&fill_kernel, &fill_words, nullptr, 3, sizes) == CUDA_SUCCESS);
  PROBE_CHECK(tidepool_sim_register_kernel(&check_kernel, &check_words, nullptr, 4, sizes) == CUDA_SUCCESS);
  CUstream stream = nullptr;
  PROBE_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  std::atomic<std::uint64_t> errors{0};
  std::vector<CUdeviceptr> blocks(kBlocks, 0);
  for (std::size_t b = 0; b < kBlocks; ++b) {
    PROBE_CHECK(cuMemAlloc(&blocks[b], kBlock) == CUDA_SUCCESS);
    PackedFill fill{reinterpret_cast<std::uint32_t*>(blocks[b]), kBlock / 4, static_cast<std::uint32_t>(b)};
    if (blocks[b] != 0) {
      PROBE_CHECK(launch_packed(fill_kernel, stream, &fill, offsetof(PackedFill, seed) + 4) == CUDA_SUCCESS);
    }
  }
  for (int round = 0; round < 2; ++round) {
    for (std::size_t b = 0; b < kBlocks; ++b) {
      if (blocks[b] == 0) continue;
      PackedCheck check{reinterpret_cast<std::uint32_t*>(blocks[b]), kBlock / 4, static_cast<std::uint32_t>(b),
                        &errors};
      PROBE_CHECK(launch_packed(check_kernel, stream, &check, sizeof check) == CUDA_SUCCESS);
    }
  }

  // A 16-byte buffer that ends where an inaccessible page begins, naming
  // block 0, claiming far more than it holds.
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* pages = ::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  PROBE_CHECK(pages != MAP_FAILED);
  if (pages != MAP_FAILED) {
    PROBE_CHECK(::mprotect(static_cast<char*>(pages) + page, page, PROT_NONE) == 0);
    void* small = static_cast<char*>(pages) + page - 16;
    std::memcpy(small, &blocks[0], sizeof(CUdeviceptr));
    for (std::size_t claimed : {std::size_t{1} << 20, std::size_t{1} << 40}) {
      PROBE_CHECK(launch_packed(check_kernel, stream, small, claimed) == CUDA_ERROR_INVALID_VALUE);
    }
    ::munmap(pages, 2 * page);
  }

  PROBE_CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  PROBE_CHECK(errors.load() == 0);
  for (CUdeviceptr p : blocks) {
    if (p != 0) PROBE_CHECK(cuMemFree(p) == CUDA_SUCCESS);
  }
  PROBE_CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  return probe::finish("extra_launch");
}

void exit_on_interrupt(int /*signal*/) {
  static constexpr char kLine[] = "interrupted\n";
  [[maybe_unused]] const ssize_t n = ::write(STDOUT_FILENO, kLine, sizeof kLine - 1);
  std::exit(probe::kPassed);  // what a program's Ctrl-C handler does: not async-signal-safe, and common
}

int sigint_route(const char* call) {
  make_context_current();
  // One block first, so that the pool (under the preload) exists and the
  // next cuMemCreate is the one it makes under its lock for new pages.
  CUdeviceptr first = 0;
  PROBE_CHECK(cuMemAlloc(&first, 2 * MiB) == CUDA_SUCCESS);
  std::signal(SIGINT, &exit_on_interrupt);
  tidepool_sim_raise_in(call, 1, SIGINT);
  CUdeviceptr large = 0;
  (void)cuMemAlloc(&large, 64 * MiB);
  std::fprintf(stderr, "the signal never came (%s was not called)\n", call);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "extra_launch") return extra_launch_route();
  if (mode == "sigint_pool") return sigint_route("cuMemCreate");
  if (mode == "sigint_native") return sigint_route("cuMemAlloc_v2");
  std::fprintf(stderr, "usage: probe_hostile extra_launch|sigint_pool|sigint_native [report-path]\n");
  return 2;
}
