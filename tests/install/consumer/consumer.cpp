// A program outside the tidepool tree: it uses an installed tidepool through
// the C API only. tests/install builds it against a moved installation, once
// with find_package(tidepool) and once with pkg-config, and in the tree
// against the build's libtidepool.so.
//
// stdout, one line each: "version V", "malloc S", on failure "cuMemAlloc_v2 R"
// (the hook's CUresult), and on success "write ok",
// "free S", "free again S". Exit 0 when every call answered as it should, 3
// when tidepool_malloc failed (its status is printed; never an abort), 4 for
// anything else.
#include <tidepool/tidepool.h>

#include <cstddef>
#include <cstdio>

// libtidepool.so exports the driver's allocation entry points (its hooks);
// a program may call them with no libcuda linked at all.
extern "C" int cuMemAlloc_v2(unsigned long long* dptr, std::size_t bytes);

int main() {
  std::printf("version %s\n", tidepool_version());
  void* block = nullptr;
  const tidepool_status allocated = tidepool_malloc(&block, std::size_t{1} << 20, 0);
  std::printf("malloc %s\n", tidepool_status_string(allocated));
  if (allocated != TIDEPOOL_OK) {
    // With no driver, the hook must answer an error (3: not initialized), never call through a null pointer.
    unsigned long long address = 0;
    std::printf("cuMemAlloc_v2 %d\n", cuMemAlloc_v2(&address, 4096));
    return 3;
  }
  if (block == nullptr) return 4;
  // The sim's device memory is host memory: a write proves the block is real.
  auto* bytes = static_cast<unsigned char*>(block);
  bytes[0] = 0x5a;
  bytes[(std::size_t{1} << 20) - 1] = 0xa5;
  std::printf("write %s\n", bytes[0] == 0x5a && bytes[(std::size_t{1} << 20) - 1] == 0xa5 ? "ok" : "lost");
  const tidepool_status freed = tidepool_free(block);
  std::printf("free %s\n", tidepool_status_string(freed));
  // A second free of the same pointer is refused, not a crash.
  const tidepool_status again = tidepool_free(block);
  std::printf("free again %s\n", tidepool_status_string(again));
  return freed == TIDEPOOL_OK && again == TIDEPOOL_ERROR_INVALID_VALUE ? 0 : 4;
}
