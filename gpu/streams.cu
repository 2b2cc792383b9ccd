// gpu/streams.cu: the stream-safety situations with real kernels. In each, a
// slow kernel still writes a buffer when the program frees it; the program
// then allocates the same size and a fast kernel on another stream fills the
// new buffer. If the allocator hands the old memory back before the slow
// kernel is done, the late write lands in the new buffer: a corrupted byte.
//   free_nonblocking:  cudaFree while a kernel on a non-blocking stream writes
//   destroyed_stream:  the stream is destroyed with that work still queued
//   per_thread:        the kernel runs on another thread's per-thread stream
//   free_async_other:  cudaFreeAsync on a second stream (ordered by an event),
//                      reallocated with cudaMallocAsync on a third
#define PROGRAM "streams"
#include <thread>

#include "common.cuh"

namespace {

const size_t kSize = 16 << 20;
long long spin_cycles = 0;

// Allocates kSize like the freed buffer, fills it on `fast` and counts bytes
// that are not the fast kernel's.
size_t reallocate_and_check(cudaStream_t fast, bool async) {
  unsigned char* fresh = nullptr;
  if (async)
    CHECK(cudaMallocAsync(&fresh, kSize, fast));
  else
    CHECK(cudaMalloc(&fresh, kSize));
  fill_kernel<<<128, 256, 0, fast>>>(fresh, kSize, 0x22);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());  // the slow kernel is done too: any late write has landed
  const size_t wrong = count_wrong(fresh, kSize, 0x22);
  if (async)
    CHECK(cudaFreeAsync(fresh, fast));
  else
    CHECK(cudaFree(fresh));
  CHECK(cudaDeviceSynchronize());
  return wrong;
}

size_t free_nonblocking(cudaStream_t fast) {
  cudaStream_t slow;
  CHECK(cudaStreamCreateWithFlags(&slow, cudaStreamNonBlocking));
  unsigned char* old = nullptr;
  CHECK(cudaMalloc(&old, kSize));
  slow_fill_kernel<<<128, 256, 0, slow>>>(old, kSize, 0x11, spin_cycles);
  CHECK(cudaFree(old));
  const size_t wrong = reallocate_and_check(fast, false);
  CHECK(cudaStreamDestroy(slow));
  return wrong;
}

size_t destroyed_stream(cudaStream_t fast) {
  cudaStream_t slow;
  CHECK(cudaStreamCreateWithFlags(&slow, cudaStreamNonBlocking));
  unsigned char* old = nullptr;
  CHECK(cudaMalloc(&old, kSize));
  slow_fill_kernel<<<128, 256, 0, slow>>>(old, kSize, 0x11, spin_cycles);
  CHECK(cudaStreamDestroy(slow));  // work still queued
  CHECK(cudaFree(old));
  return reallocate_and_check(fast, false);
}

size_t per_thread(cudaStream_t fast) {
  unsigned char* old = nullptr;
  CHECK(cudaMalloc(&old, kSize));
  std::thread([old] { slow_fill_kernel<<<128, 256, 0, cudaStreamPerThread>>>(old, kSize, 0x11, spin_cycles); }).join();
  CHECK(cudaFree(old));
  return reallocate_and_check(fast, false);
}

size_t free_async_other(cudaStream_t fast) {
  cudaStream_t a, b;
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  unsigned char* old = nullptr;
  CHECK(cudaMallocAsync(&old, kSize, a));
  slow_fill_kernel<<<128, 256, 0, a>>>(old, kSize, 0x11, spin_cycles);
  cudaEvent_t done;
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CHECK(cudaEventRecord(done, a));
  CHECK(cudaStreamWaitEvent(b, done, 0));
  CHECK(cudaFreeAsync(old, b));
  const size_t wrong = reallocate_and_check(fast, true);
  CHECK(cudaEventDestroy(done));
  CHECK(cudaStreamDestroy(a));
  CHECK(cudaStreamDestroy(b));
  return wrong;
}

}  // namespace

int main() {
  int clock_khz = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0) != cudaSuccess || clock_khz <= 0) {
    (void)cudaGetLastError();
    clock_khz = 2000000;  // an upper bound for today's GPUs: spins at least as long
  }
  spin_cycles = static_cast<long long>(clock_khz) * 50;  // about 50 ms
  cudaStream_t fast;
  CHECK(cudaStreamCreateWithFlags(&fast, cudaStreamNonBlocking));
  struct Case {
    const char* name;
    size_t (*run)(cudaStream_t);
  } cases[] = {{"free_nonblocking", free_nonblocking},
               {"destroyed_stream", destroyed_stream},
               {"per_thread", per_thread},
               {"free_async_other", free_async_other}};
  size_t total = 0;
  std::printf("%s:", PROGRAM);
  for (const Case& c : cases) {
    size_t wrong = 0;
    for (int round = 0; round < 3; ++round) wrong += c.run(fast);
    std::printf(" %s=%zu", c.name, wrong);
    total += wrong;
  }
  std::printf(" %s\n", total == 0 ? "ok" : "FAILED");
  CHECK(cudaStreamDestroy(fast));
  return total == 0 ? 0 : 1;
}
