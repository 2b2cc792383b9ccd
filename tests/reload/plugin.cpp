// A plugin of the kind a host loads and unloads at will (a Caffe layer, a
// Python extension): it links libtidepool.so as its allocator and does one
// round of work per call. It leaves one block live on purpose, as plugins
// do: unloading must give its pages back all the same.
#include <tidepool/tidepool.h>

#include <cstddef>
#include <cstring>

extern "C" __attribute__((visibility("default"))) int plugin_cycle(unsigned cycle) {
  constexpr std::size_t kSizes[] = {256, 4096, 1 << 20, 3 << 20, 5 << 20, 64 << 10};
  void* blocks[6] = {};
  for (std::size_t i = 0; i < 6; ++i) {
    const tidepool_status s = i % 2 == 0 ? tidepool_malloc(&blocks[i], kSizes[i], 0)
                                         : tidepool_malloc_async(&blocks[i], kSizes[i], 0, nullptr);
    if (s != TIDEPOOL_OK || blocks[i] == nullptr) return 1;
    // The sim's device memory is host memory: written and read directly.
    std::memset(blocks[i], static_cast<int>(cycle + i), kSizes[i]);
  }
  for (std::size_t i = 0; i < 6; ++i) {
    const auto* bytes = static_cast<const unsigned char*>(blocks[i]);
    if (bytes[0] != static_cast<unsigned char>(cycle + i) || bytes[kSizes[i] - 1] != bytes[0]) return 2;
  }
  for (std::size_t i = 0; i < 5; ++i) {
    const tidepool_status s = i % 2 == 0 ? tidepool_free(blocks[i]) : tidepool_free_async(blocks[i], nullptr);
    if (s != TIDEPOOL_OK) return 3;
  }
  return 0;  // blocks[5] stays live
}
