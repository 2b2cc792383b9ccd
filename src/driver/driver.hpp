// The driver layer's one header: the only code in tidepool that speaks CUDA.
//
// A Driver is libcuda.so.1 (or the sim, or any path the user names) opened at
// run time with dlopen, never linked. Its entry points are resolved once into
// an Api table, through the driver's own cuGetProcAddress where it has one
// (so each name yields the variant matching the driver's version), else by
// exported symbol. Entry points a driver lacks stay null; callers that need an
// optional one check it. A CUresult leaves this layer as a util::Status.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <string>

#include "driver/entry_points.hpp"
#include "util/util.hpp"

namespace tidepool::driver {

struct Api {
// A declarator and a qualified name: neither can take parentheses.
// NOLINTNEXTLINE(bugprone-macro-parentheses)
#define TIDEPOOL_DECLARE_ENTRY(field, name, symbol, abi_version) decltype(&::symbol) field = nullptr;
  TIDEPOOL_DRIVER_ENTRY_POINTS(TIDEPOOL_DECLARE_ENTRY)
#undef TIDEPOOL_DECLARE_ENTRY
  // The driver's resolver, v2 signature. Null on drivers older than 12.0.
  decltype(&::cuGetProcAddress_v2) getProcAddress = nullptr;
};

// How a Driver finds symbols in the library it opened. The interposer passes
// the real dlsym so that its own dlsym hook is not consulted.
using SymbolLookup = void* (*)(void* handle, const char* name);

class Driver {
 public:
  // Opens the driver at `path` (see default_driver_path) and resolves the
  // table. Fails with driver_missing when the library cannot be opened (the
  // message holds dlerror()'s text and what to do: install the driver, or
  // point TIDEPOOL_CUDA_LIB at the simulated one), and with driver_error when
  // it lacks an entry point tidepool cannot do without.
  static util::Result<std::unique_ptr<Driver>> open(const std::string& path, SymbolLookup lookup = nullptr);
  ~Driver();
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  [[nodiscard]] const Api& api() const noexcept { return api_; }
  // cuDriverGetVersion's answer, e.g. 12040.
  [[nodiscard]] int version() const noexcept { return version_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  // The dlopen handle, for callers that must resolve further symbols.
  [[nodiscard]] void* handle() const noexcept { return handle_; }

 private:
  Driver() = default;
  void* handle_ = nullptr;
  int version_ = 0;
  std::string path_;
  Api api_{};
};

// TIDEPOOL_CUDA_LIB when set, else "libcuda.so.1".
std::string default_driver_path();

// Turns a CUresult into a Status: CUDA_SUCCESS is ok; out-of-memory,
// invalid-value and not-supported map to their util::Error; the rest become
// driver_error. `what` must be a static string naming the failed operation.
util::Status check(CUresult result, const char* what) noexcept;

// Whether `stream` is capturing (the legacy stream counts as capturing while
// a blocking stream of its context captures: the driver's
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT). Work recorded on it would join the
// capture, so tidepool records nothing there.
bool capturing(const Api& api, CUstream stream) noexcept;

// What a device can do, read once per device. Requires a current context.
struct Capabilities {
  int device = 0;
  bool vmm = false;            // cuMemCreate/cuMemMap and friends
  bool host_vmm = false;       // CU_MEM_LOCATION_TYPE_HOST physical memory
  bool host_numa_vmm = false;  // CU_MEM_LOCATION_TYPE_HOST_NUMA physical memory
  int host_numa_id = -1;
  // Physical pages can be created exportable as POSIX file descriptors
  // (cuMemExportToShareableHandle), which is how IPC shares pool pages.
  bool posix_fd_handles = false;
  std::size_t granularity = 0;  // minimum VMM granularity for device memory, 0 without VMM
  std::size_t total_bytes = 0;
  std::size_t free_bytes = 0;
};

util::Result<Capabilities> probe(const Driver& driver, int device);

}  // namespace tidepool::driver

#include "driver/context.hpp"  // IWYU pragma: export
