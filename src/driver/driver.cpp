// Opening the driver and resolving the entry-point table.
//
// Resolution order for each entry: the driver's cuGetProcAddress_v2 with the
// driver's own version (clamped to the headers'), so that "cuMemAlloc" yields
// cuMemAlloc_v2 exactly as cudart would get it; then the exported symbol.
#include "driver/driver.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace tidepool::driver {

namespace {

// libc's dlsym, found without consulting any dlsym a preloaded library (our
// own hook included) exports, so resolving the driver can never recurse.
void* real_dlsym(void* handle, const char* name) {
  using DlsymFn = void* (*)(void*, const char*);
  static const DlsymFn real = [] {
    for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"}) {
      if (void* fn = ::dlvsym(RTLD_NEXT, "dlsym", version)) return reinterpret_cast<DlsymFn>(fn);
    }
    return static_cast<DlsymFn>(&::dlsym);
  }();
  return real(handle, name);
}

// Where the simulated driver sits beside the library or program this code
// was linked into: <libdir>/tidepool/sim/ beside an installed library,
// ../lib/tidepool/sim/ beside an installed tool, sim/ in a build tree. A
// placeholder when none holds it.
std::string sim_driver_hint() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&sim_driver_hint), &info) != 0 && info.dli_fname != nullptr) {
    std::string dir = info.dli_fname;
    const std::size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? std::string(".") : dir.substr(0, slash);
    for (const char* relative :
         {"/tidepool/sim/libcuda.so.1", "/../lib/tidepool/sim/libcuda.so.1", "/sim/libcuda.so.1"}) {
      std::string candidate = dir + relative;
      if (::access(candidate.c_str(), R_OK) == 0) return candidate;
    }
  }
  return "<prefix>/lib/tidepool/sim/libcuda.so.1";
}

// A Status carries static text only, so each distinct "why dlopen failed"
// line is kept for the life of the process in a fixed table: no heap, nothing
// to give back at dlclose, and a slot is never rewritten once published.
// Past the table's capacity the line loses the dlerror text, not the advice.
constexpr std::size_t kOpenErrorSlots = 8;
constexpr std::size_t kOpenErrorLength = 480;
std::mutex open_errors_lock;
std::array<std::array<char, kOpenErrorLength>, kOpenErrorSlots> open_errors{};
std::size_t open_errors_used = 0;

const char* open_error_message(const char* why) {
  std::string line = "cannot dlopen the CUDA driver library: ";
  std::string reason = why != nullptr && *why != '\0' ? why : "unknown dlopen error";
  if (reason.size() > 200) reason = reason.substr(0, 197) + "...";
  for (char& c : reason) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  }
  line += reason;
  line += "; install the NVIDIA driver, or use the simulated one: set TIDEPOOL_CUDA_LIB=";
  line += sim_driver_hint();
  line += " (or run the program under tidepool-run --sim)";
  if (line.size() >= kOpenErrorLength) line = line.substr(0, kOpenErrorLength - 4) + "...";

  const std::lock_guard<std::mutex> hold(open_errors_lock);
  for (std::size_t i = 0; i < open_errors_used; ++i) {
    if (line == open_errors[i].data()) return open_errors[i].data();
  }
  if (open_errors_used == kOpenErrorSlots) {
    return "cannot dlopen the CUDA driver library; install the NVIDIA driver, or set TIDEPOOL_CUDA_LIB to "
           "<prefix>/lib/tidepool/sim/libcuda.so.1 for the simulated driver (or run under tidepool-run --sim)";
  }
  char* slot = open_errors[open_errors_used++].data();
  std::memcpy(slot, line.c_str(), line.size() + 1);
  return slot;
}

}  // namespace

std::string default_driver_path() {
  const char* env = ::secure_getenv("TIDEPOOL_CUDA_LIB");
  if (env != nullptr && *env != '\0') return env;
  return "libcuda.so.1";
}

util::Result<std::unique_ptr<Driver>> Driver::open(const std::string& path, SymbolLookup lookup) {
  if (lookup == nullptr) lookup = &real_dlsym;
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    // dlerror() says why (no such file, wrong ELF class, a missing
    // dependency); the message adds what to do about it.
    return util::Status(util::Error::driver_missing, open_error_message(::dlerror()));
  }
  std::unique_ptr<Driver> driver(new Driver());
  driver->handle_ = handle;
  driver->path_ = path;
  Api& api = driver->api_;

  api.driverGetVersion = reinterpret_cast<decltype(api.driverGetVersion)>(lookup(handle, "cuDriverGetVersion"));
  // A failure here would turn tidepool off for the whole process, so a
  // passing one (the fault sweep injects it) gets two more tries.
  bool answered = false;
  for (int attempt = 0; attempt < 3 && api.driverGetVersion != nullptr && !answered; ++attempt) {
    answered = api.driverGetVersion(&driver->version_) == CUDA_SUCCESS;
  }
  if (!answered) {
    return util::Status(util::Error::driver_error, "the driver library has no working cuDriverGetVersion");
  }
  api.getProcAddress = reinterpret_cast<decltype(api.getProcAddress)>(lookup(handle, "cuGetProcAddress_v2"));

  // Each entry is asked for at the version of the variant we call (see
  // entry_points.hpp), capped at the driver's own.
  auto resolve = [&](const char* name, const char* symbol, int abi_version) -> void* {
    if (api.getProcAddress != nullptr) {
      void* fn = nullptr;
      CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      const int request_version = std::min(driver->version_, abi_version);
      if (api.getProcAddress(name, &fn, request_version, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS &&
          found == CU_GET_PROC_ADDRESS_SUCCESS && fn != nullptr) {
        return fn;
      }
    }
    return lookup(handle, symbol);
  };
#define TIDEPOOL_RESOLVE_ENTRY(field, name, symbol, abi_version) \
  api.field = reinterpret_cast<decltype(api.field)>(resolve(name, #symbol, abi_version));
  TIDEPOOL_DRIVER_ENTRY_POINTS(TIDEPOOL_RESOLVE_ENTRY)
#undef TIDEPOOL_RESOLVE_ENTRY

  // Without these nothing tidepool does can work.
  if (api.init == nullptr || api.deviceGet == nullptr || api.deviceGetAttribute == nullptr ||
      api.devicePrimaryCtxRetain == nullptr || api.ctxGetCurrent == nullptr || api.ctxSetCurrent == nullptr ||
      api.memAlloc == nullptr || api.memFree == nullptr || api.memGetInfo == nullptr ||
      api.streamSynchronize == nullptr || api.eventCreate == nullptr || api.eventRecord == nullptr ||
      api.eventQuery == nullptr) {
    return util::Status(util::Error::driver_error, "the driver library lacks required entry points");
  }
  return driver;
}

Driver::~Driver() {
  // The handle is deliberately not closed: other code in the process (cudart,
  // the program) shares the same loaded driver, and callbacks may still run.
}

bool capturing(const Api& api, CUstream stream) noexcept {
  if (api.streamIsCapturing == nullptr) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = api.streamIsCapturing(stream, &status);
  if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) return true;
  return r == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

util::Status check(CUresult result, const char* what) noexcept {
  switch (result) {
    case CUDA_SUCCESS: return util::Status::success();
    case CUDA_ERROR_OUT_OF_MEMORY: return {util::Error::out_of_memory, what, result};
    case CUDA_ERROR_INVALID_VALUE: return {util::Error::invalid_value, what, result};
    case CUDA_ERROR_INVALID_HANDLE: return {util::Error::invalid_handle, what, result};
    case CUDA_ERROR_NOT_SUPPORTED: return {util::Error::not_supported, what, result};
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_INVALID_CONTEXT: return {util::Error::not_initialized, what, result};
    default: return {util::Error::driver_error, what, result};
  }
}

util::Result<Capabilities> probe(const Driver& driver, int device) {
  const Api& api = driver.api();
  Capabilities caps;
  caps.device = device;
  if (auto s = check(api.init(0), "cuInit"); !s) return s;
  CUdevice dev = 0;
  if (auto s = check(api.deviceGet(&dev, device), "cuDeviceGet"); !s) return s;

  auto attribute = [&](CUdevice_attribute attr) {
    int value = 0;
    return api.deviceGetAttribute(&value, attr, dev) == CUDA_SUCCESS ? value : 0;
  };
  const bool vmm_entries = api.memAddressReserve != nullptr && api.memCreate != nullptr && api.memMap != nullptr &&
                           api.memUnmap != nullptr && api.memSetAccess != nullptr && api.memRelease != nullptr &&
                           api.memAddressFree != nullptr && api.memGetAllocationGranularity != nullptr;
  caps.vmm = vmm_entries && attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0;
  caps.host_vmm = caps.vmm && attribute(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0;
  caps.host_numa_vmm = caps.vmm && attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0;
  caps.posix_fd_handles = caps.vmm && api.memExportToShareableHandle != nullptr &&
                          api.memImportFromShareableHandle != nullptr &&
                          attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) != 0;
  {
    int numa = -1;
    if (api.deviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev) == CUDA_SUCCESS) {
      caps.host_numa_id = numa;
    }
  }

  if (caps.vmm) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    std::size_t granularity = 0;
    if (api.memGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS &&
        granularity != 0) {
      caps.granularity = granularity;
    } else {
      caps.vmm = caps.host_vmm = caps.host_numa_vmm = false;
    }
  }

  if (api.deviceTotalMem != nullptr) {
    std::size_t total = 0;
    if (api.deviceTotalMem(&total, dev) == CUDA_SUCCESS) caps.total_bytes = total;
  }
  // cuMemGetInfo needs a context; use the current one or retain the primary.
  CUcontext current = nullptr;
  api.ctxGetCurrent(&current);
  if (current != nullptr) {
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    if (api.memGetInfo(&free_bytes, &total_bytes) == CUDA_SUCCESS) {
      caps.free_bytes = free_bytes;
      if (caps.total_bytes == 0) caps.total_bytes = total_bytes;
    }
  }
  return caps;
}

}  // namespace tidepool::driver
