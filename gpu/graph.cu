// gpu/graph.cu: cudaMallocAsync/cudaFreeAsync on the default pool (release
// threshold at max), then a CUDA graph captured with an allocation, kernels, a
// copy and a free inside the capture (tidepool passes captured allocations to
// the driver) reading a buffer allocated before the capture. The graph is
// replayed several times; every result byte is checked, and the captured
// allocation must be the driver's graph memory.
#define PROGRAM "graph"
#include <cstdint>

#include "common.cuh"

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t threshold = UINT64_MAX;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));

  size_t wrong = 0;
  for (int i = 0; i < 20; ++i) {  // stream-ordered churn
    const size_t size = (size_t(1) << (10 + i % 14)) + i;
    unsigned char* p = nullptr;
    CHECK(cudaMallocAsync(&p, size, s));
    fill_kernel<<<64, 256, 0, s>>>(p, size, static_cast<unsigned char>(i));
    CHECK(cudaStreamSynchronize(s));
    wrong += count_wrong(p, size, static_cast<unsigned char>(i));
    CHECK(cudaFreeAsync(p, s));
  }

  const size_t n = 4 << 20;
  unsigned char *input = nullptr, *output = nullptr;
  CHECK(cudaMalloc(&input, n));
  CHECK(cudaMalloc(&output, n));
  fill_kernel<<<64, 256, 0, s>>>(input, n, 40);
  CHECK(cudaStreamSynchronize(s));

  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  unsigned char* scratch = nullptr;
  CHECK(cudaMallocAsync(&scratch, n, s));
  CHECK(cudaMemcpyAsync(scratch, input, n, cudaMemcpyDeviceToDevice, s));
  add_kernel<<<64, 256, 0, s>>>(scratch, n, 2);
  CHECK(cudaMemcpyAsync(output, scratch, n, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaFreeAsync(scratch, s));
  add_kernel<<<64, 256, 0, s>>>(input, n, 1);  // the next replay sees one more
  CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 5; ++replay) {
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    wrong += count_wrong(output, n, static_cast<unsigned char>(42 + replay));
  }
  // The captured allocation is the driver's graph memory, so the capture
  // was seen (the preload routes an allocation into a capture to the
  // driver only once it knows a capture began).
  uint64_t graph_memory_high = 0;
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &graph_memory_high));
  if (graph_memory_high < n) {
    std::printf("%s: the captured allocation was not graph memory (reserved high %llu)\n", PROGRAM,
                static_cast<unsigned long long>(graph_memory_high));
    ++wrong;
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaFree(input));
  CHECK(cudaFree(output));
  CHECK(cudaStreamDestroy(s));
  std::printf("%s: %s replays=5 wrong=%zu\n", PROGRAM, wrong == 0 ? "ok" : "FAILED", wrong);
  return wrong == 0 ? 0 : 1;
}
