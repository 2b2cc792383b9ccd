// tidepool as an RMM memory resource. Header-only: include it where RMM's
// headers (and the CCCL they ship) are on the include path, and link
// libtidepool.so.
//
//   tidepool::rmm_resource pool{0};
//   rmm::device_async_resource_ref ref{pool};
//   rmm::device_buffer buffer{bytes, stream, ref};
//
// The resource satisfies CCCL's cuda::mr resource concept, which is what
// RMM's resource_ref and containers take. Memory is stream-ordered on the
// stream given: reuse on that stream is immediate, on another it waits on an
// event recorded at the free. The *_sync forms have cudaMalloc/cudaFree
// semantics. Every instance on one device shares tidepool's one pool.
#pragma once

#include <tidepool/tidepool.h>

#include <cstddef>
#include <cuda/memory_resource>
#include <cuda/stream>
#include <rmm/error.hpp>
#include <string>

namespace tidepool {

class rmm_resource {
 public:
  // Blocks start on at least this boundary: the pool's small-block rounding.
  static constexpr std::size_t max_alignment = 512;

  explicit rmm_resource(int device = 0) noexcept : device_(device) {}

  [[nodiscard]] void* allocate(cuda::stream_ref stream, std::size_t bytes,
                               std::size_t alignment = alignof(std::max_align_t)) {
    check_alignment(alignment);
    void* ptr = nullptr;
    raise(tidepool_malloc_async(&ptr, bytes, device_, stream.get()), bytes);
    return ptr;
  }

  void deallocate(cuda::stream_ref stream, void* ptr, std::size_t /*bytes*/,
                  std::size_t /*alignment*/ = alignof(std::max_align_t)) noexcept {
    // RMM's contract: deallocate never throws. A foreign pointer is refused
    // by tidepool, which logs it and changes nothing.
    (void)tidepool_free_async(ptr, stream.get());
  }

  [[nodiscard]] void* allocate_sync(std::size_t bytes, std::size_t alignment = alignof(std::max_align_t)) {
    check_alignment(alignment);
    void* ptr = nullptr;
    raise(tidepool_malloc(&ptr, bytes, device_), bytes);
    return ptr;
  }

  void deallocate_sync(void* ptr, std::size_t /*bytes*/,
                       std::size_t /*alignment*/ = alignof(std::max_align_t)) noexcept {
    (void)tidepool_free(ptr);
  }

  [[nodiscard]] int device() const noexcept { return device_; }

  // Two resources on one device are one pool: memory from either may be
  // returned through the other.
  bool operator==(const rmm_resource& other) const noexcept { return device_ == other.device_; }
  bool operator!=(const rmm_resource& other) const noexcept { return !(*this == other); }

  friend void get_property(const rmm_resource&, cuda::mr::device_accessible) noexcept {}

 private:
  static void check_alignment(std::size_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > max_alignment) {
      throw rmm::logic_error("tidepool::rmm_resource: alignment must be a power of two up to 512");
    }
  }
  static void raise(tidepool_status status, std::size_t bytes) {
    if (status == TIDEPOOL_OK) return;
    if (status == TIDEPOOL_ERROR_OUT_OF_MEMORY) {
      throw rmm::out_of_memory("tidepool: out of device memory allocating " + std::to_string(bytes) + " bytes");
    }
    throw rmm::bad_alloc(std::string("tidepool: ") + tidepool_status_string(status));
  }

  int device_;
};

static_assert(cuda::mr::resource_with<rmm_resource, cuda::mr::device_accessible>,
              "tidepool::rmm_resource must be a CCCL memory resource");

}  // namespace tidepool
