// PyTorch's pluggable allocator over the C API. PyTorch calls these through
// torch.cuda.memory.CUDAPluggableAllocator(path, "tidepool_torch_malloc",
// "tidepool_torch_free"); memory is stream-ordered on the stream PyTorch
// names, exactly as cudaMallocAsync would treat it.
#include <cstdint>

#include "allocate_from.hpp"
#include "runtime/runtime.hpp"
#include "tidepool/tidepool.h"

extern "C" {

void* tidepool_torch_malloc(ptrdiff_t size, int device, void* stream) {
  if (size <= 0) return nullptr;
  void* ptr = nullptr;
  const tidepool_status s = tidepool::capi::malloc_async_from(
      &ptr, static_cast<size_t>(size), device, stream, reinterpret_cast<std::uintptr_t>(__builtin_return_address(0)));
  return s == TIDEPOOL_OK ? ptr : nullptr;
}

void tidepool_torch_free(void* ptr, ptrdiff_t /*size*/, int /*device*/, void* stream) {
  const tidepool_status s = tidepool_free_async(ptr, stream);
  if (s != TIDEPOOL_OK) {
    tidepool::runtime::log_error("tidepool_torch_free({}): {}", ptr, tidepool_status_string(s));
  }
}

}  // extern "C"
