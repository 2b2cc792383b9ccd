// gpu/basic.cu: cudaMalloc/cudaFree through the runtime, built twice by
// scripts/gpu-bundle.sh: with nvcc's default static cudart (which reaches the
// driver through cuGetProcAddress) and with -cudart shared (whose cudaMalloc
// the preload hooks). Sizes from 1 byte to 64 MiB, filled by a kernel,
// reallocated in a churn loop, every byte checked.
#ifndef PROGRAM
#define PROGRAM "basic"
#endif
#include "common.cuh"

int main() {
  const size_t sizes[] = {1, 200, 512, 4096, 65536, 1 << 20, (1 << 20) + 3, 2 << 20, 7 << 20, 64 << 20};
  const int n = sizeof(sizes) / sizeof(sizes[0]);
  size_t wrong = 0, checked = 0;
  for (int round = 0; round < 8; ++round) {
    unsigned char* p[n];
    for (int i = 0; i < n; ++i) {
      CHECK(cudaMalloc(&p[i], sizes[i]));
      fill_kernel<<<64, 256>>>(p[i], sizes[i], static_cast<unsigned char>(round * 16 + i));
    }
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; ++i) {
      wrong += count_wrong(p[i], sizes[i], static_cast<unsigned char>(round * 16 + i));
      checked += sizes[i];
    }
    for (int i = (round % 2 ? 0 : n - 1); i >= 0 && i < n; i += (round % 2 ? 1 : -1)) CHECK(cudaFree(p[i]));
  }
  size_t free_bytes = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total));
  const bool ok = wrong == 0 && free_bytes <= total;
  std::printf("%s: %s checked=%zu wrong=%zu\n", PROGRAM, ok ? "ok" : "FAILED", checked, wrong);
  return ok ? 0 : 1;
}
