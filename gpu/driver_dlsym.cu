// gpu/driver_dlsym.cu: the driver API found the way some frameworks find it:
// dlopen("libcuda.so.1") and dlsym of the versioned names (cuMemAlloc_v2,
// cuMemFree_v2, cuMemAllocAsync, cuMemFreeAsync). A runtime kernel fills the
// memory (same primary context); every byte is read back through the driver.
#define PROGRAM "driver_dlsym"
#include <cuda.h>
#include <dlfcn.h>

#include "common.cuh"

template <typename Fn>
Fn lookup(void* lib, const char* name) {
  Fn fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (fn == nullptr) {
    std::printf("%s: FAILED dlsym %s\n", PROGRAM, name);
    std::exit(1);
  }
  return fn;
}

int main() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::printf("%s: FAILED dlopen libcuda.so.1\n", PROGRAM);
    return 1;
  }
  auto init = lookup<decltype(&cuInit)>(lib, "cuInit");
  auto device_get = lookup<decltype(&cuDeviceGet)>(lib, "cuDeviceGet");
  auto retain = lookup<decltype(&cuDevicePrimaryCtxRetain)>(lib, "cuDevicePrimaryCtxRetain");
  auto set_current = lookup<decltype(&cuCtxSetCurrent)>(lib, "cuCtxSetCurrent");
  auto mem_alloc = lookup<decltype(&cuMemAlloc_v2)>(lib, "cuMemAlloc_v2");
  auto mem_free = lookup<decltype(&cuMemFree_v2)>(lib, "cuMemFree_v2");
  auto alloc_async = lookup<decltype(&cuMemAllocAsync)>(lib, "cuMemAllocAsync");
  auto free_async = lookup<decltype(&cuMemFreeAsync)>(lib, "cuMemFreeAsync");
  auto memset_d8 = lookup<decltype(&cuMemsetD8_v2)>(lib, "cuMemsetD8_v2");
  auto dtoh = lookup<decltype(&cuMemcpyDtoH_v2)>(lib, "cuMemcpyDtoH_v2");
  auto stream_create = lookup<decltype(&cuStreamCreate)>(lib, "cuStreamCreate");
  auto stream_sync = lookup<decltype(&cuStreamSynchronize)>(lib, "cuStreamSynchronize");
  auto stream_destroy = lookup<decltype(&cuStreamDestroy_v2)>(lib, "cuStreamDestroy_v2");

  CUdevice dev;
  CUcontext ctx;
  DRV(init(0));
  DRV(device_get(&dev, 0));
  DRV(retain(&ctx, dev));
  DRV(set_current(ctx));
  CUstream stream;
  DRV(stream_create(&stream, CU_STREAM_NON_BLOCKING));

  const size_t sizes[] = {256, 4096, 1 << 20, 3 << 20, 32 << 20};
  size_t wrong = 0, checked = 0;
  for (int round = 0; round < 6; ++round) {
    for (size_t size : sizes) {
      const unsigned char value = static_cast<unsigned char>(round * 7 + size % 251);
      CUdeviceptr p;
      const bool async = round % 2 == 1;
      if (async)
        DRV(alloc_async(&p, size, stream));
      else
        DRV(mem_alloc(&p, size));
      DRV(memset_d8(p, 0, size));
      fill_kernel<<<64, 256, 0, async ? reinterpret_cast<cudaStream_t>(stream) : 0>>>(
          reinterpret_cast<unsigned char*>(p), size, value);
      CHECK(cudaGetLastError());
      DRV(stream_sync(async ? stream : nullptr));
      std::vector<unsigned char> host(size);
      DRV(dtoh(host.data(), p, size));
      for (unsigned char b : host) wrong += b != value;
      checked += size;
      if (async)
        DRV(free_async(p, stream));
      else
        DRV(mem_free(p));
    }
  }
  DRV(stream_sync(stream));
  DRV(stream_destroy(stream));
  std::printf("%s: %s checked=%zu wrong=%zu\n", PROGRAM, wrong == 0 ? "ok" : "FAILED", checked, wrong);
  return wrong == 0 ? 0 : 1;
}
