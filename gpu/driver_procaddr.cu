// gpu/driver_procaddr.cu: the driver API resolved through cuGetProcAddress,
// both directly (the driver's resolver, found with dlsym) and through the
// runtime's cudaGetDriverEntryPointByVersion, as static cudart and libraries
// like cuBLAS do. Allocates, fills with cuMemsetD8 and a kernel, reads back.
#define PROGRAM "driver_procaddr"
#include <cuda.h>
#include <dlfcn.h>

#include "common.cuh"

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

int main() {
  CHECK(cudaFree(nullptr));  // the runtime makes the primary context current
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  GetProc get_proc = lib ? reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2")) : nullptr;
  if (get_proc == nullptr) {
    std::printf("%s: FAILED no cuGetProcAddress_v2\n", PROGRAM);
    return 1;
  }
  void *alloc_fn = nullptr, *free_fn = nullptr, *memset_fn = nullptr, *dtoh_fn = nullptr;
  CUdriverProcAddressQueryResult found;
  DRV(get_proc("cuMemAlloc", &alloc_fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  DRV(get_proc("cuMemFree", &free_fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  DRV(get_proc("cuMemsetD8", &memset_fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  DRV(get_proc("cuMemcpyDtoH", &dtoh_fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  // The same names through the runtime's own resolver.
  void *rt_alloc = nullptr, *rt_free = nullptr;
  cudaDriverEntryPointQueryResult rt_found;
  CHECK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &rt_alloc, CUDA_VERSION, cudaEnableDefault, &rt_found));
  CHECK(cudaGetDriverEntryPointByVersion("cuMemFree", &rt_free, CUDA_VERSION, cudaEnableDefault, &rt_found));
  auto mem_alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(alloc_fn);
  auto mem_free = reinterpret_cast<decltype(&cuMemFree_v2)>(free_fn);
  auto memset_d8 = reinterpret_cast<decltype(&cuMemsetD8_v2)>(memset_fn);
  auto dtoh = reinterpret_cast<decltype(&cuMemcpyDtoH_v2)>(dtoh_fn);
  auto rt_mem_alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(rt_alloc);
  auto rt_mem_free = reinterpret_cast<decltype(&cuMemFree_v2)>(rt_free);

  const size_t sizes[] = {100, 8192, 1 << 20, 5 << 20, 48 << 20};
  size_t wrong = 0, checked = 0;
  for (int round = 0; round < 6; ++round) {
    for (size_t size : sizes) {
      const bool via_runtime = round % 2 == 1;
      const unsigned char value = static_cast<unsigned char>(round * 13 + size % 241);
      CUdeviceptr p;
      DRV(via_runtime ? rt_mem_alloc(&p, size) : mem_alloc(&p, size));
      DRV(memset_d8(p, static_cast<unsigned char>(value - 1), size));
      add_kernel<<<64, 256>>>(reinterpret_cast<unsigned char*>(p), size, 1);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());
      std::vector<unsigned char> host(size);
      DRV(dtoh(host.data(), p, size));
      for (unsigned char b : host) wrong += b != value;
      checked += size;
      DRV(via_runtime ? rt_mem_free(p) : mem_free(p));
    }
  }
  std::printf("%s: %s checked=%zu wrong=%zu\n", PROGRAM, wrong == 0 ? "ok" : "FAILED", checked, wrong);
  return wrong == 0 ? 0 : 1;
}
