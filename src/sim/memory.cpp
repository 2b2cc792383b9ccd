// Device memory: cuMemAlloc and friends, host allocations, the VMM calls,
// and sharing memory with other processes.
//
// VA reservations are PROT_NONE mappings, so touching an unmapped page
// faults. Physical allocations are memfd files: cuMemMap maps the file at the
// address with MAP_FIXED|MAP_SHARED, so the same physical memory mapped
// elsewhere shows the same bytes. A mapping stays inaccessible until
// cuMemSetAccess. Device-located memory counts against the capacity.
//
// Sharing between processes, as the driver's two ways do:
//  - shareable handles: physical memory made with
//    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR requested is exported as a
//    dup of its memfd (cuMemExportToShareableHandle); another process (or
//    this one) imports that descriptor (cuMemImportFromShareableHandle) as
//    physical memory of its own, over a dup of the same file. The memfd's
//    name says where the memory lives (see Physical), which is all the
//    importer learns. Imported memory takes no capacity: it is the
//    exporter's.
//  - legacy IPC: cuMemAlloc / cuMemAllocPitch memory is a memfd mapped
//    MAP_SHARED, named for the allocation (its process's nonce, buffer id
//    and device). cuIpcGetMemHandle writes into the 64-byte handle the
//    exporter's pid and descriptor number, and the allocation's size, buffer
//    id, device and nonce; cuIpcOpenMemHandle in another process opens
//    /proc/PID/fd/FD (the kernel lets a process of the same user do so),
//    checks the file's name and size against the handle, and maps it at an
//    address of its own, kept as device memory of the opening context (so
//    that kernels and copies see device memory) until cuIpcCloseMemHandle.
//    Stream-ordered (pool) memory, VMM mappings and host memory have no
//    legacy handle, as on the driver.
//
// During stream capture (see streams.cpp): the synchronous allocation calls
// (cuMemAlloc, cuMemAllocPitch, cuMemFree, cuMemAllocHost, cuMemHostAlloc,
// cuMemFreeHost) are "potentially unsafe" and checked against the capture
// mode; cuMemAllocAsync / cuMemFreeAsync on a capturing stream become graph
// memory nodes: the allocation is made at once, the free is recorded, not
// performed, and is done when the graph is destroyed.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "sim/sim.hpp"

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

using namespace tidepool::sim;  // NOLINT(google-build-using-namespace): exported C entry points below

namespace {

constexpr std::size_t kHostPage = 4096;

void* map_anonymous(std::size_t size, int prot) {
  void* p = ::mmap(nullptr, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// The name of the memfd under a cuMemAlloc allocation, which cuIpcOpenMemHandle
// checks against the handle it opens.
std::string ipc_file_name(std::uint64_t nonce, std::uint64_t buffer_id, int device) {
  char name[96];
  std::snprintf(name, sizeof name, "tidepool-sim-ipc-%016llx-%llu-device-%d", static_cast<unsigned long long>(nonce),
                static_cast<unsigned long long>(buffer_id), device);
  return name;
}

// The name of the memfd under physical memory (see Physical).
std::string physical_file_name(bool on_device, int device) {
  return on_device ? "tidepool-sim-device-" + std::to_string(device) : std::string("tidepool-sim-host");
}

// The name of the memfd `fd` refers to ("/memfd:NAME (deleted)"), or empty
// when it is no memfd (or no open descriptor).
std::string memfd_name(int fd) {
  char link[64];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  char target[512];
  const ssize_t n = ::readlink(link, target, sizeof target);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof target) return {};
  const std::string_view text(target, static_cast<std::size_t>(n));
  constexpr std::string_view kPrefix = "/memfd:";
  constexpr std::string_view kSuffix = " (deleted)";
  if (text.size() < kPrefix.size() + kSuffix.size() || text.substr(0, kPrefix.size()) != kPrefix ||
      text.substr(text.size() - kSuffix.size()) != kSuffix) {
    return {};
  }
  return std::string(text.substr(kPrefix.size(), text.size() - kPrefix.size() - kSuffix.size()));
}

// Where the physical memory under the memfd `fd` lives, from its name; false
// when it is not the sim's physical memory.
bool physical_location(int fd, bool* on_device, int* device) {
  const std::string name = memfd_name(fd);
  if (name == physical_file_name(false, 0)) {
    *on_device = false;
    *device = 0;
    return true;
  }
  constexpr std::string_view kDevice = "tidepool-sim-device-";
  if (name.size() <= kDevice.size() || name.size() > kDevice.size() + 2 ||
      name.compare(0, kDevice.size(), kDevice) != 0) {
    return false;
  }
  int ordinal = 0;
  for (std::size_t i = kDevice.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    ordinal = ordinal * 10 + (name[i] - '0');
  }
  if (physical_file_name(true, ordinal) != name) return false;  // no leading zeros
  *on_device = true;
  *device = ordinal;
  return true;
}

std::size_t round_host(std::size_t n) { return (n + kHostPage - 1) / kHostPage * kHostPage; }

// Takes `bytes` of device capacity; false when the device is full. Locked.
bool take_device_bytes(State& s, std::size_t bytes) {
  if (s.device_used + bytes > s.capacity || s.device_used + bytes < s.device_used) return false;
  s.device_used += bytes;
  return true;
}

// The device of the calling thread's current context (0 without one).
int current_device() {
  Context* context = current_context();
  return context != nullptr ? context->device : 0;
}

// Whether memory of `kind` takes the device's capacity.
bool on_device(AllocationKind kind) { return kind == AllocationKind::device || kind == AllocationKind::array; }

// Device memory is a memfd mapped MAP_SHARED (see the top of this file),
// host memory anonymous. Without a descriptor to spare (the process at its
// limit of open files), device memory falls back to anonymous memory, which
// is all it lacks: cuIpcGetMemHandle on it answers CUDA_ERROR_OUT_OF_MEMORY.
CUresult allocate(CUdeviceptr* out, std::size_t size, AllocationKind kind, int device = current_device()) {
  if (out == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  const std::size_t rounded = round_host(size);
  std::uint64_t buffer_id = 0;
  std::uint64_t nonce = 0;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    if (on_device(kind) && !take_device_bytes(s, rounded)) return CUDA_ERROR_OUT_OF_MEMORY;
    buffer_id = ++s.next_buffer_id;
    nonce = s.ipc_nonce;
  }
  int fd = -1;
  void* p = nullptr;
  if (kind == AllocationKind::device) {
    fd = ::memfd_create(ipc_file_name(nonce, buffer_id, device).c_str(), MFD_CLOEXEC);
    if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(rounded)) == 0) {
      p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
      if (p == MAP_FAILED) p = nullptr;
    }
    if (p == nullptr && fd >= 0) {
      ::close(fd);
      fd = -1;
    }
  }
  if (p == nullptr) p = map_anonymous(rounded, PROT_READ | PROT_WRITE);
  std::lock_guard<std::mutex> guard(s.lock);
  if (p == nullptr) {
    if (on_device(kind)) s.device_used -= rounded;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s.allocations[reinterpret_cast<std::uintptr_t>(p)] =
      Allocation{.size = size, .kind = kind, .device = device, .buffer_id = buffer_id, .fd = fd};
  *out = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

// cuMemFree and friends: memory opened by cuIpcOpenMemHandle is not theirs
// to release (cuIpcCloseMemHandle is).
CUresult release(std::uintptr_t base, AllocationKind expected) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.allocations.find(base);
  if (it == s.allocations.end() || it->second.kind != expected || it->second.ipc_import) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const std::size_t rounded = round_host(it->second.size);
  ::munmap(reinterpret_cast<void*>(base), rounded);
  if (it->second.fd >= 0) ::close(it->second.fd);
  if (on_device(expected)) s.device_used -= rounded;
  s.allocations.erase(it);
  return CUDA_SUCCESS;
}

constexpr std::size_t kSpareFileBytes = std::size_t{1} << 30;

// Memory another process may map (exported) or that is another
// allocation's (imported) is never kept for reuse: its file is closed, and
// the memory lives on in whoever still holds it. Only memory this process
// made is counted, so only that is given back.
void destroy_physical(State& s, Physical* p) {
  if (!p->exported && !p->imported && s.spare_file_bytes + p->size <= kSpareFileBytes) {
    s.spare_files.push_back(State::SpareFile{p->size, p->fd, p->on_device, p->device});
    s.spare_file_bytes += p->size;
  } else {
    ::close(p->fd);
  }
  if (!p->imported) (p->on_device ? s.device_used : s.host_used) -= p->size;
  s.physicals.erase(p);
}

bool in_reservation(const State& s, std::uintptr_t address, std::size_t size) {
  auto it = s.reservations.upper_bound(address);
  if (it == s.reservations.begin()) return false;
  --it;
  return address >= it->first && address + size <= it->first + it->second;
}

// The mappings exactly covering [address, address + size), in order; empty
// when the range is not a union of whole mappings.
std::vector<std::map<std::uintptr_t, Mapping>::iterator> covering(State& s, std::uintptr_t address, std::size_t size) {
  std::vector<std::map<std::uintptr_t, Mapping>::iterator> out;
  std::uintptr_t at = address;
  while (at < address + size) {
    auto it = s.mappings.find(at);
    if (it == s.mappings.end()) return {};
    out.push_back(it);
    at += it->second.size;
  }
  if (at != address + size) return {};
  return out;
}

// The allocation or mapping holding `address`, if any. Locked.
const Allocation* allocation_at(const State& s, std::uintptr_t address, std::uintptr_t* base) {
  auto a = s.allocations.upper_bound(address);
  if (a == s.allocations.begin()) return nullptr;
  --a;
  if (address >= a->first + a->second.size) return nullptr;
  *base = a->first;
  return &a->second;
}

const Mapping* mapping_at(const State& s, std::uintptr_t address, std::uintptr_t* base) {
  auto m = s.mappings.upper_bound(address);
  if (m == s.mappings.begin()) return nullptr;
  --m;
  if (address >= m->first + m->second.size) return nullptr;
  *base = m->first;
  return &m->second;
}

}  // namespace

// --- cuMemAlloc family --------------------------------------------------------------------------

TIDEPOOL_SIM_EXPORT CUresult cuMemAlloc(CUdeviceptr* dptr, std::size_t bytes) {
  if (CUresult r = enter_initialized("cuMemAlloc_v2"); r != CUDA_SUCCESS) return r;
  if (current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  return allocate(dptr, bytes, AllocationKind::device);
}

TIDEPOOL_SIM_EXPORT CUresult cuMemAllocPitch(CUdeviceptr* dptr, std::size_t* pitch, std::size_t width,
                                             std::size_t height, unsigned int element_bytes) {
  if (CUresult r = enter_initialized("cuMemAllocPitch_v2"); r != CUDA_SUCCESS) return r;
  if (current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (pitch == nullptr || width == 0 || height == 0 ||
      (element_bytes != 4 && element_bytes != 8 && element_bytes != 16)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Rows are padded to 512 bytes; a size that does not fit in size_t after
  // that is an invalid request, never a small allocation.
  constexpr std::size_t kAlign = 512;
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  if (width > kMax - (kAlign - 1)) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t row = (width + kAlign - 1) / kAlign * kAlign;
  if (height > kMax / row) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  if (CUresult r = allocate(dptr, row * height, AllocationKind::device); r != CUDA_SUCCESS) return r;
  *pitch = row;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemFree(CUdeviceptr dptr) {
  if (CUresult r = enter_initialized("cuMemFree_v2"); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  if (dptr == 0) return CUDA_SUCCESS;
  // Like the driver, freeing waits for work that may still use the memory.
  synchronize_all();
  return release(static_cast<std::uintptr_t>(dptr), AllocationKind::device);
}

namespace {

// `pool`: cuMemAllocFromPoolAsync's; null for the current pool of the stream's device.
CUresult alloc_async(const char* name, CUdeviceptr* dptr, std::size_t bytes, CUstream handle, MemPool* pool = nullptr) {
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  {
    State& s = state();
    std::lock_guard<std::mutex> guard(s.lock);
    if (pool == nullptr) pool = s.current_pools[static_cast<std::size_t>(stream->context()->device)];
    if (!s.live_pools.contains(pool)) return CUDA_ERROR_INVALID_VALUE;
  }
  // Nothing to run: the sim allocates at once. On a capturing stream this
  // adds the graph's allocation node; the legacy-stream rules still apply.
  const Submitted sub = submit(stream, {}, [](Node& node) { node.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC; });
  if (sub.result != CUDA_SUCCESS) return sub.result;
  if (CUresult r = allocate(dptr, bytes, AllocationKind::device, pool->device); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  s.allocations[static_cast<std::uintptr_t>(*dptr)].pool = pool;
  if (sub.capture && sub.capture->target() != nullptr) {
    sub.capture->target()->allocations.push_back(static_cast<std::uintptr_t>(*dptr));
  }
  return CUDA_SUCCESS;
}

CUresult free_async(const char* name, CUdeviceptr dptr, CUstream handle) {
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  State& s = state();
  {
    std::lock_guard<std::mutex> guard(s.lock);
    auto it = s.allocations.find(static_cast<std::uintptr_t>(dptr));
    if (it == s.allocations.end() || it->second.kind != AllocationKind::device || it->second.ipc_import) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  // The free takes effect when the stream reaches it; captured, when the
  // graph is destroyed (a launch of the graph frees nothing: its memory
  // node's work is not kept).
  const Submitted sub = submit(
      stream, [dptr] { (void)release(static_cast<std::uintptr_t>(dptr), AllocationKind::device); },
      [](Node& node) {
        node.work = nullptr;
        node.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
      });
  if (sub.result != CUDA_SUCCESS) return sub.result;
  if (sub.capture) {
    std::lock_guard<std::mutex> guard(s.lock);
    if (sub.capture->target() != nullptr) sub.capture->target()->frees.push_back(static_cast<std::uintptr_t>(dptr));
  }
  return CUDA_SUCCESS;
}

}  // namespace

namespace tidepool::sim {

CUresult release_device_allocation(std::uintptr_t base) { return release(base, AllocationKind::device); }

CUresult allocate_array_storage(std::size_t bytes, std::uintptr_t* base) {
  CUdeviceptr p = 0;
  if (CUresult r = allocate(&p, bytes, AllocationKind::array); r != CUDA_SUCCESS) return r;
  *base = static_cast<std::uintptr_t>(p);
  return CUDA_SUCCESS;
}

CUresult release_array_storage(std::uintptr_t base) { return release(base, AllocationKind::array); }

}  // namespace tidepool::sim

TIDEPOOL_SIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytes, CUstream handle) {
  return alloc_async("cuMemAllocAsync", dptr, bytes, handle);
}

TIDEPOOL_SIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream handle) {
  return free_async("cuMemFreeAsync", dptr, handle);
}

TIDEPOOL_SIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUstream handle) {
  return alloc_async("cuMemAllocAsync_ptsz", dptr, bytes, handle == nullptr ? CU_STREAM_PER_THREAD : handle);
}

TIDEPOOL_SIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream handle) {
  return free_async("cuMemFreeAsync_ptsz", dptr, handle == nullptr ? CU_STREAM_PER_THREAD : handle);
}

// --- memory pools --------------------------------------------------------------------------

namespace {

MemPool* live_pool(State& s, CUmemoryPool handle) {
  auto* pool = reinterpret_cast<MemPool*>(handle);
  return s.live_pools.contains(pool) ? pool : nullptr;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool,
                                                     CUstream handle) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async("cuMemAllocFromPoolAsync", dptr, bytes, handle, reinterpret_cast<MemPool*>(pool));
}

TIDEPOOL_SIM_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* out, const CUmemPoolProps* props) {
  if (CUresult r = enter_initialized("cuMemPoolCreate"); r != CUDA_SUCCESS) return r;
  if (out == nullptr || props == nullptr || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = state();
  if (props->location.id < 0 || props->location.id >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
  auto pool = std::make_unique<MemPool>();
  pool->device = props->location.id;
  std::lock_guard<std::mutex> guard(s.lock);
  *out = reinterpret_cast<CUmemoryPool>(pool.get());
  s.live_pools.insert(pool.get());
  s.pools[pool.get()] = std::move(pool);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool handle) {
  if (CUresult r = enter_initialized("cuMemPoolDestroy"); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  MemPool* pool = live_pool(s, handle);
  if (pool == nullptr || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
  s.live_pools.erase(pool);
  // The device's current pool goes back to its default; blocks still out
  // stay usable until freed.
  MemPool*& current = s.current_pools[static_cast<std::size_t>(pool->device)];
  if (current == pool) current = s.default_pools[static_cast<std::size_t>(pool->device)];
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool handle, const CUmemAccessDesc* map, std::size_t count) {
  if (CUresult r = enter_initialized("cuMemPoolSetAccess"); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  MemPool* pool = live_pool(s, handle);
  if (pool == nullptr || (map == nullptr && count > 0)) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t access = pool->access;
  for (std::size_t i = 0; i < count; ++i) {
    if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    const int device = map[i].location.id;
    if (device < 0 || device >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
    // The pool's own device keeps read-write access: it cannot be changed.
    if (device == pool->device) {
      if (map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return CUDA_ERROR_INVALID_DEVICE;
      continue;
    }
    const std::uint64_t bit = std::uint64_t{1} << device;
    access = map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ? access & ~bit : access | bit;
  }
  pool->access = access;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* out, CUdevice device) {
  if (CUresult r = enter_initialized("cuDeviceGetDefaultMemPool"); r != CUDA_SUCCESS) return r;
  State& s = state();
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device < 0 || device >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> guard(s.lock);
  *out = reinterpret_cast<CUmemoryPool>(s.default_pools[static_cast<std::size_t>(device)]);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* out, CUdevice device) {
  if (CUresult r = enter_initialized("cuDeviceGetMemPool"); r != CUDA_SUCCESS) return r;
  State& s = state();
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device < 0 || device >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> guard(s.lock);
  *out = reinterpret_cast<CUmemoryPool>(s.current_pools[static_cast<std::size_t>(device)]);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuDeviceSetMemPool(CUdevice device, CUmemoryPool handle) {
  if (CUresult r = enter_initialized("cuDeviceSetMemPool"); r != CUDA_SUCCESS) return r;
  State& s = state();
  if (device < 0 || device >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> guard(s.lock);
  MemPool* pool = live_pool(s, handle);
  if (pool == nullptr || pool->device != device) return CUDA_ERROR_INVALID_VALUE;  // must be local to the device
  s.current_pools[static_cast<std::size_t>(device)] = pool;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  if (CUresult r = enter_initialized("cuMemGetInfo_v2"); r != CUDA_SUCCESS) return r;
  if (current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  *total_bytes = s.capacity;
  *free_bytes = s.capacity > s.device_used ? s.capacity - s.device_used : 0;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemAllocHost(void** pp, std::size_t bytes) {
  if (CUresult r = enter_initialized("cuMemAllocHost_v2"); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  CUresult r = allocate(&p, bytes, AllocationKind::host);
  if (r == CUDA_SUCCESS) *pp = reinterpret_cast<void*>(p);
  return r;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemHostAlloc(void** pp, std::size_t bytes, unsigned int /*flags*/) {
  if (CUresult r = enter_initialized("cuMemHostAlloc"); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  CUresult r = allocate(&p, bytes, AllocationKind::host);
  if (r == CUDA_SUCCESS) *pp = reinterpret_cast<void*>(p);
  return r;
}

// Unified addressing: pinned host memory is mapped into the device's
// address space at its host address whatever the allocation flags, so the
// device pointer is the host pointer.
TIDEPOOL_SIM_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int flags) {
  if (CUresult r = enter_initialized("cuMemHostGetDevicePointer_v2"); r != CUDA_SUCCESS) return r;
  if (current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (pdptr == nullptr || p == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  std::uintptr_t base = 0;
  const Allocation* a = allocation_at(s, address, &base);
  if (a == nullptr || a->kind != AllocationKind::host) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = static_cast<CUdeviceptr>(address);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemFreeHost(void* p) {
  if (CUresult r = enter_initialized("cuMemFreeHost"); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  synchronize_all();
  return release(reinterpret_cast<std::uintptr_t>(p), AllocationKind::host);
}

// --- virtual memory management --------------------------------------------------------------------

TIDEPOOL_SIM_EXPORT CUresult cuMemGetAllocationGranularity(std::size_t* granularity, const CUmemAllocationProp* prop,
                                                           CUmemAllocationGranularity_flags /*option*/) {
  if (CUresult r = enter_initialized("cuMemGetAllocationGranularity"); r != CUDA_SUCCESS) return r;
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = state().granularity;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, std::size_t size, std::size_t alignment,
                                                 CUdeviceptr /*addr*/, unsigned long long flags) {
  if (CUresult r = enter_initialized("cuMemAddressReserve"); r != CUDA_SUCCESS) return r;
  State& s = state();
  if (ptr == nullptr || size == 0 || size % s.granularity != 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment == 0) alignment = s.granularity;
  if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  // Over-reserve, then trim to the alignment.
  void* raw = map_anonymous(size + alignment, PROT_NONE);
  if (raw == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + alignment - 1) & ~(alignment - 1);
  if (aligned > start) ::munmap(raw, aligned - start);
  const std::uintptr_t tail = start + size + alignment - (aligned + size);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + size), tail);
  std::lock_guard<std::mutex> guard(s.lock);
  s.reservations[aligned] = size;
  *ptr = static_cast<CUdeviceptr>(aligned);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, std::size_t size) {
  if (CUresult r = enter_initialized("cuMemAddressFree"); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.reservations.find(static_cast<std::uintptr_t>(ptr));
  if (it == s.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  // The driver requires every mapping in the range to be gone first.
  auto m = s.mappings.lower_bound(it->first);
  if (m != s.mappings.end() && m->first < it->first + size) return CUDA_ERROR_INVALID_VALUE;
  const std::uintptr_t begin = it->first;
  s.reservations.erase(it);
  {
    // Scratch that running work still writes stays until that work is
    // done: the range leaves the process then (settle_under_work).
    std::lock_guard<std::mutex> running(s.running_lock);
    const bool in_use = std::any_of(s.scratch.begin(), s.scratch.end(),
                                    [&](const State::Touch& t) { return t.meets(begin, begin + size); });
    if (in_use) {
      s.freed_under_scratch.push_back({begin, begin + size});
      return CUDA_SUCCESS;
    }
  }
  ::munmap(reinterpret_cast<void*>(begin), size);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t size,
                                         const CUmemAllocationProp* prop, unsigned long long flags) {
  if (CUresult r = enter_initialized("cuMemCreate"); r != CUDA_SUCCESS) return r;
  const bool pins = prop != nullptr && prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE;  // host-located
  vmm_delay(pins ? VmmCall::host_create : VmmCall::create, size);
  State& s = state();
  if (handle == nullptr || prop == nullptr || flags != 0 || size == 0 || size % s.granularity != 0 ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUmemLocationType where = prop->location.type;
  const bool on_device = where == CU_MEM_LOCATION_TYPE_DEVICE;
  if (!on_device && where != CU_MEM_LOCATION_TYPE_HOST && where != CU_MEM_LOCATION_TYPE_HOST_NUMA &&
      where != CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (on_device && (prop->location.id < 0 || prop->location.id >= s.device_count)) return CUDA_ERROR_INVALID_DEVICE;
  // Shareable as a POSIX file descriptor, or not at all: no Win32 or fabric
  // handles on the sim.
  if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE &&
      prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const int device = on_device ? prop->location.id : 0;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    if (on_device && !take_device_bytes(s, size)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!on_device) s.host_used += size;
  }
  int fd = -1;
  {
    // A spare file's name says where its memory lives: only one of the
    // same place will do.
    std::lock_guard<std::mutex> guard(s.lock);
    for (auto it = s.spare_files.begin(); it != s.spare_files.end(); ++it) {
      if (it->size != size || it->on_device != on_device || it->device != device) continue;
      fd = it->fd;
      s.spare_file_bytes -= size;
      s.spare_files.erase(it);
      break;
    }
  }
  if (fd < 0) fd = ::memfd_create(physical_file_name(on_device, device).c_str(), MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) ::close(fd);
    std::lock_guard<std::mutex> guard(s.lock);
    (on_device ? s.device_used : s.host_used) -= size;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto physical = std::make_unique<Physical>();
  physical->fd = fd;
  physical->size = size;
  physical->on_device = on_device;
  physical->device = device;
  physical->location = prop->location;
  physical->handle_types = prop->requestedHandleTypes;
  std::lock_guard<std::mutex> guard(s.lock);
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(physical.get());
  s.physicals[physical.get()] = std::move(physical);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (CUresult r = enter_initialized("cuMemRelease"); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::size_t bytes = 0;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    auto it = s.physicals.find(reinterpret_cast<Physical*>(handle));
    if (it == s.physicals.end() || it->second->released) return CUDA_ERROR_INVALID_VALUE;
    it->second->released = true;
    bytes = it->second->size;
    // Memory still mapped somewhere lives until its last unmap.
    if (it->second->maps == 0) destroy_physical(s, it->first);
  }
  vmm_delay(VmmCall::release, bytes);  // outside the lock, as the other calls' costs
  return CUDA_SUCCESS;
}

namespace {

// mmap with MAP_FIXED over reserved VA: memory bound to, or taken from, an
// address. That is the driver's act, not a write of the calling thread, yet
// TSan takes the mmap for one and would report the stream work that next
// touches the memory as racing with it whenever that work is ordered after
// the map only through the device (behind a cuStreamWaitValue32 the host
// opens, say). With the thread's accesses ignored, TSan resets the range
// instead: the memory starts without history, as a fresh binding does.
void* map_fixed(std::uintptr_t address, std::size_t size, int flags, int fd, off_t offset, int prot = PROT_NONE) {
#if defined(__SANITIZE_THREAD__)
  __tsan_ignore_thread_begin();
#endif
  void* mapped = ::mmap(reinterpret_cast<void*>(address), size, prot, flags | MAP_FIXED, fd, offset);
#if defined(__SANITIZE_THREAD__)
  __tsan_ignore_thread_end();
#endif
  return mapped;
}

// The protection the host gives a mapping: it stands in for every device,
// so it may do what any of them may.
int protection(std::uint64_t readers, std::uint64_t writers) {
  return writers != 0 ? PROT_READ | PROT_WRITE : (readers != 0 ? PROT_READ : PROT_NONE);
}

// `call` takes [begin, end) from under the running work that touches it.
// Each that needs what was taken (any touch; with `writes_only`, a write)
// has faulted on a GPU: it is told (`hit`) and counted in remap_faults, the
// first reported on stderr. (A kernel's extent counts as a read: the sim
// cannot tell whether it writes.) Where any work touches the range, it
// joins `settle_in` for settle_under_work, in the same hold of
// running_lock, so that work leaving meanwhile settles it. Whether any
// work touches it. Under s.lock.
bool fault_work_under(State& s, std::uintptr_t begin, std::uintptr_t end, bool writes_only, const char* call,
                      std::vector<State::Touch>* settle_in) {
  bool touched = false;
  std::lock_guard<std::mutex> running(s.running_lock);
  for (const State::RunningWork& work : s.running) {
    bool meets = false;
    bool needs = false;
    for (const State::Touch& t : work.touches) {
      if (!t.meets(begin, end)) continue;
      meets = true;
      needs = needs || t.write || !writes_only;
    }
    touched = touched || meets;
    if (!needs) continue;
    work.hit->store(true);
    if (s.remap_faults.fetch_add(1) == 0) {
      std::fprintf(stderr,
                   "tidepool sim: %s(%#llx, %zu) under running work that touches it (a %s): on a GPU it faults "
                   "(CUDA_ERROR_ILLEGAL_ADDRESS, sticky)\n",
                   call, static_cast<unsigned long long>(begin), static_cast<std::size_t>(end - begin), work.what);
    }
  }
  if (touched) {
    settle_in->push_back({begin, end});
    s.unsettled_ranges.store(s.scratch.size() + s.access_kept.size());
  }
  return touched;
}

// Whether [begin, end) meets a mapping whose protection is kept for
// running work (State::access_kept). Under s.lock.
bool access_kept_over(const State& s, std::uintptr_t begin, std::uintptr_t end) {
  return std::any_of(s.access_kept.begin(), s.access_kept.end(),
                     [&](const State::Touch& kept) { return kept.meets(begin, end); });
}

// A mapping made over scratch, [begin, end) unmapped under running work
// that goes on: it stays readable and writable for that work, as the
// scratch it replaces was, until the work is done, then takes the
// protection its access list gives (none before cuMemSetAccess). Whether
// it was kept. Under s.lock.
bool keep_access_for_work(State& s, std::uintptr_t begin, std::uintptr_t end) {
  if (std::none_of(s.scratch.begin(), s.scratch.end(), [&](const State::Touch& t) { return t.meets(begin, end); })) {
    return false;
  }
  std::lock_guard<std::mutex> running(s.running_lock);
  const bool touched = std::any_of(s.running.begin(), s.running.end(), [&](const State::RunningWork& work) {
    return std::any_of(work.touches.begin(), work.touches.end(),
                       [&](const State::Touch& t) { return t.meets(begin, end); });
  });
  if (!touched) return false;
  // In the same hold of running_lock as the check: work that leaves
  // meanwhile still settles it.
  s.access_kept.push_back({begin, end});
  s.unsettled_ranges.store(s.scratch.size() + s.access_kept.size());
  return true;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuMemMap(CUdeviceptr ptr, std::size_t size, std::size_t offset,
                                      CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (CUresult r = enter_initialized("cuMemMap"); r != CUDA_SUCCESS) return r;
  vmm_delay(VmmCall::map, size);
  State& s = state();
  const auto address = static_cast<std::uintptr_t>(ptr);
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.physicals.find(reinterpret_cast<Physical*>(handle));
  if (it == s.physicals.end() || it->second->released) return CUDA_ERROR_INVALID_HANDLE;
  Physical* physical = it->first;
  if (flags != 0 || size == 0 || size % s.granularity != 0 || offset % s.granularity != 0 ||
      address % s.granularity != 0 || offset + size > physical->size || !in_reservation(s, address, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto next = s.mappings.lower_bound(address);
  if (next != s.mappings.end() && next->first < address + size) return CUDA_ERROR_ALREADY_MAPPED;
  if (next != s.mappings.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > address) return CUDA_ERROR_ALREADY_MAPPED;
  }
  const bool under_work = keep_access_for_work(s, address, address + size);
  void* mapped = map_fixed(address, size, MAP_SHARED, physical->fd, static_cast<off_t>(offset),
                           under_work ? PROT_READ | PROT_WRITE : PROT_NONE);
  if (mapped == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;  // a kept range with nothing mapped settles as none
  physical->maps++;
  if (!physical->on_device) s.host_mappings.fetch_add(1);
  s.mappings[address] = Mapping{.size = size, .physical = physical, .offset = offset, .buffer_id = ++s.next_buffer_id};
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, std::size_t size) {
  if (CUresult r = enter_initialized("cuMemUnmap"); r != CUDA_SUCCESS) return r;
  vmm_delay(VmmCall::unmap, size);
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto pieces = covering(s, static_cast<std::uintptr_t>(ptr), size);
  if (pieces.empty()) return CUDA_ERROR_INVALID_VALUE;
  const auto begin = static_cast<std::uintptr_t>(ptr);
  // Running work that touches the range would touch a page with nothing
  // mapped: on a GPU it faults.
  const bool under_work = fault_work_under(s, begin, begin + size, /*writes_only=*/false, "cuMemUnmap", &s.scratch);
  // Back to an inaccessible reservation at the same addresses; under
  // running work, scratch until it is done (settle_under_work).
  map_fixed(begin, size, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0,
            under_work ? PROT_READ | PROT_WRITE : PROT_NONE);
  for (auto it : pieces) {
    Physical* physical = it->second.physical;
    if (!physical->on_device) s.host_mappings.fetch_sub(1);
    s.mappings.erase(it);
    if (--physical->maps == 0 && physical->released) destroy_physical(s, physical);
  }
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, std::size_t size, const CUmemAccessDesc* desc,
                                            std::size_t count) {
  if (CUresult r = enter_initialized("cuMemSetAccess"); r != CUDA_SUCCESS) return r;
  vmm_delay(VmmCall::set_access, size);
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto pieces = covering(s, static_cast<std::uintptr_t>(ptr), size);
  if (pieces.empty()) return CUDA_ERROR_INVALID_VALUE;
  // Each location's flags are set; devices the list does not name keep theirs.
  std::uint64_t named = 0;
  std::uint64_t readers = 0;
  std::uint64_t writers = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) continue;  // host access is not modelled
    const int device = desc[i].location.id;
    if (device < 0 || device >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
    const std::uint64_t bit = std::uint64_t{1} << device;
    named |= bit;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      readers |= bit;
      writers |= bit;
    } else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ) {
      readers |= bit;
    } else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (auto it : pieces) {
    Mapping& m = it->second;
    const std::uint64_t r = (m.readers & ~named) | readers;
    const std::uint64_t w = (m.writers & ~named) | writers;
    const int before = protection(m.readers, m.writers);
    const int prot = protection(r, w);
    const bool loses_reads = before != PROT_NONE && prot == PROT_NONE;
    const bool loses_writes = (before & PROT_WRITE) != 0 && (prot & PROT_WRITE) == 0;
    const std::uintptr_t begin = it->first;
    // Access taken from under running work: the protection stays as it is
    // until that work is done (settle_under_work), and only rises meanwhile.
    const bool touched = (loses_reads || loses_writes) &&
                         fault_work_under(s, begin, begin + m.size, !loses_reads, "cuMemSetAccess", &s.access_kept);
    const bool kept = touched || (access_kept_over(s, begin, begin + m.size) && prot != (PROT_READ | PROT_WRITE));
    if (!kept && ::mprotect(reinterpret_cast<void*>(begin), m.size, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
    m.readers = r;
    m.writers = w;
  }
  return CUDA_SUCCESS;
}

// --- sharing memory with other processes ------------------------------------------------------------

TIDEPOOL_SIM_EXPORT CUresult cuMemExportToShareableHandle(void* shareable_handle, CUmemGenericAllocationHandle handle,
                                                          CUmemAllocationHandleType handle_type,
                                                          unsigned long long flags) {
  if (CUresult r = enter_initialized("cuMemExportToShareableHandle"); r != CUDA_SUCCESS) return r;
  if (shareable_handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.physicals.find(reinterpret_cast<Physical*>(handle));
  if (it == s.physicals.end() || it->second->released) return CUDA_ERROR_INVALID_VALUE;
  Physical* physical = it->first;
  // Only the type cuMemCreate was asked for can be exported.
  if (handle_type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
      (physical->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The caller's own descriptor of the same file, closed by the caller.
  const int fd = ::fcntl(physical->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  physical->exported = true;
  *static_cast<int*>(shareable_handle) = fd;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                                            CUmemAllocationHandleType handle_type) {
  if (CUresult r = enter_initialized("cuMemImportFromShareableHandle"); r != CUDA_SUCCESS) return r;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (handle_type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    const bool other_kind = handle_type == CU_MEM_HANDLE_TYPE_WIN32 || handle_type == CU_MEM_HANDLE_TYPE_WIN32_KMT ||
                            handle_type == CU_MEM_HANDLE_TYPE_FABRIC;
    return other_kind ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
  }
  // A POSIX descriptor travels as the pointer's value; the caller keeps it.
  const auto value = reinterpret_cast<std::uintptr_t>(os_handle);
  if (value > static_cast<std::uintptr_t>(INT_MAX)) return CUDA_ERROR_INVALID_VALUE;
  const int fd = static_cast<int>(value);
  bool on_device = true;
  int device = 0;
  if (!physical_location(fd, &on_device, &device)) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  // Memory of a device this process does not have (the exporter was given
  // more by TIDEPOOL_SIM_DEVICES).
  if (on_device && device >= s.device_count) return CUDA_ERROR_NOT_SUPPORTED;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0 || static_cast<std::size_t>(st.st_size) % kHostPage != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  auto physical = std::make_unique<Physical>();
  physical->fd = own;
  physical->size = static_cast<std::size_t>(st.st_size);
  physical->on_device = on_device;
  physical->device = device;
  physical->location.type = on_device ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
  physical->location.id = device;
  physical->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;  // how it came
  physical->imported = true;                                          // takes no capacity: the exporter's memory
  std::lock_guard<std::mutex> guard(s.lock);
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(physical.get());
  s.physicals[physical.get()] = std::move(physical);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                                    CUmemGenericAllocationHandle handle) {
  if (CUresult r = enter_initialized("cuMemGetAllocationPropertiesFromHandle"); r != CUDA_SUCCESS) return r;
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.physicals.find(reinterpret_cast<Physical*>(handle));
  if (it == s.physicals.end() || it->second->released) return CUDA_ERROR_INVALID_VALUE;
  *prop = CUmemAllocationProp{};
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->requestedHandleTypes = it->second->handle_types;
  prop->location = it->second->location;
  return CUDA_SUCCESS;
}

namespace {

// What a legacy IPC handle (CUipcMemHandle, 64 opaque bytes) carries.
struct IpcMemHandle {
  std::uint32_t magic = 0;
  std::int32_t pid = 0;     // the exporter's
  std::int32_t fd = -1;     // the exporter's descriptor of the allocation's memfd
  std::int32_t device = 0;  // in the memfd's name
  std::uint64_t size = 0;   // the allocation's size, as cuMemAlloc was asked
  std::uint64_t buffer_id = 0;
  std::uint64_t nonce = 0;  // the exporter's State::ipc_nonce
};
static_assert(sizeof(IpcMemHandle) <= CU_IPC_HANDLE_SIZE);
constexpr std::uint32_t kIpcMagic = 0x54504d48;  // "HMPT"

// cuIpcOpenMemHandle and cuIpcOpenMemHandle_v2, which differ only in name.
CUresult open_ipc_handle(const char* name, CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned flags) {
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  Context* context = current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (pdptr == nullptr || (flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  IpcMemHandle h;
  std::memcpy(&h, handle.reserved, sizeof h);
  if (h.magic != kIpcMagic || h.pid <= 0 || h.fd < 0 || h.size == 0 || h.device < 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  // A handle is for other processes: its own process opening it is refused,
  // as the driver refuses it ("invalid device context").
  if (h.pid == ::getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  const std::pair<std::uint64_t, std::uint64_t> key{h.nonce, h.buffer_id};
  // Opened already: one more reference to the same mapping.
  const auto reopen = [&]() -> bool {
    auto it = s.ipc_opened.find(key);
    if (it == s.ipc_opened.end()) return false;
    s.allocations[it->second].opens++;
    *pdptr = static_cast<CUdeviceptr>(it->second);
    return true;
  };
  {
    std::lock_guard<std::mutex> guard(s.lock);
    if (reopen()) return CUDA_SUCCESS;
  }
  // The exporter's descriptor, through its /proc entry; gone with the
  // exporter or its allocation (a stale handle).
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", h.pid, h.fd);
  const int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t rounded = round_host(h.size);
  struct stat st {};
  // The descriptor number may have been reused since: the name must be the
  // allocation's, the size its size.
  if (memfd_name(fd) != ipc_file_name(h.nonce, h.buffer_id, h.device) || ::fstat(fd, &st) != 0 ||
      static_cast<std::size_t>(st.st_size) != rounded) {
    ::close(fd);
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    ::close(fd);
    return CUDA_ERROR_MAP_FAILED;
  }
  std::lock_guard<std::mutex> guard(s.lock);
  if (reopen()) {  // another thread opened it meanwhile
    ::munmap(p, rounded);
    ::close(fd);
    return CUDA_SUCCESS;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  // Device memory of the opening context, not counted against its capacity.
  s.allocations[base] = Allocation{.size = static_cast<std::size_t>(h.size),
                                   .kind = AllocationKind::device,
                                   .device = context->device,
                                   .buffer_id = ++s.next_buffer_id,
                                   .fd = fd,
                                   .ipc_import = true,
                                   .opens = 1};
  s.ipc_opened[key] = base;
  *pdptr = static_cast<CUdeviceptr>(base);
  return CUDA_SUCCESS;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  if (CUresult r = enter_initialized("cuIpcGetMemHandle"); r != CUDA_SUCCESS) return r;
  if (current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  // Any address inside a cuMemAlloc / cuMemAllocPitch allocation names the
  // whole of it. Pool memory (cuMemAllocAsync), VMM mappings, host memory
  // and memory opened from another process have no legacy handle.
  std::uintptr_t base = 0;
  const Allocation* a = allocation_at(s, static_cast<std::uintptr_t>(dptr), &base);
  if (a == nullptr || a->kind != AllocationKind::device || a->pool != nullptr || a->ipc_import) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (a->fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;  // made without a descriptor to spare (see allocate)
  IpcMemHandle h;
  h.magic = kIpcMagic;
  h.pid = ::getpid();
  h.fd = a->fd;
  h.device = a->device;
  h.size = a->size;
  h.buffer_id = a->buffer_id;
  h.nonce = s.ipc_nonce;
  *handle = CUipcMemHandle{};
  std::memcpy(handle->reserved, &h, sizeof h);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return open_ipc_handle("cuIpcOpenMemHandle_v2", pdptr, handle, flags);
}

// The CUDA 4.1 name, which cuda.h now maps to the _v2 one; the same call.
TIDEPOOL_SIM_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return open_ipc_handle("cuIpcOpenMemHandle", pdptr, handle, flags);
}

TIDEPOOL_SIM_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  if (CUresult r = enter_initialized("cuIpcCloseMemHandle"); r != CUDA_SUCCESS) return r;
  if (current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const auto base = static_cast<std::uintptr_t>(dptr);
  State& s = state();
  {
    std::lock_guard<std::mutex> guard(s.lock);
    auto it = s.allocations.find(base);
    if (it == s.allocations.end() || !it->second.ipc_import || it->second.opens <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (--it->second.opens > 0) return CUDA_SUCCESS;
    // Closed: a later open maps the memory afresh.
    std::erase_if(s.ipc_opened, [base](const auto& entry) { return entry.second == base; });
  }
  // Like cuMemFree, the unmap waits for work that may still use the memory.
  synchronize_all();
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.allocations.find(base);  // still there: only this call removes an import now
  if (it == s.allocations.end()) return CUDA_SUCCESS;
  ::munmap(reinterpret_cast<void*>(base), round_host(it->second.size));
  ::close(it->second.fd);
  s.allocations.erase(it);
  return CUDA_SUCCESS;
}

// Interprocess events are not simulated: the sim's events are the progress
// of its own stream threads, which no other process can see or wait on.
// CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED answers 0 accordingly, and both
// calls CUDA_ERROR_NOT_SUPPORTED.
TIDEPOOL_SIM_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle* /*handle*/, CUevent /*event*/) {
  if (CUresult r = enter_initialized("cuIpcGetEventHandle"); r != CUDA_SUCCESS) return r;
  return CUDA_ERROR_NOT_SUPPORTED;
}

TIDEPOOL_SIM_EXPORT CUresult cuIpcOpenEventHandle(CUevent* /*event*/, CUipcEventHandle /*handle*/) {
  if (CUresult r = enter_initialized("cuIpcOpenEventHandle"); r != CUDA_SUCCESS) return r;
  return CUDA_ERROR_NOT_SUPPORTED;
}

// --- where memory lives, for copies, launches and stream memory operations ---------------------------

namespace tidepool::sim {

bool host_located(std::uintptr_t address) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  std::uintptr_t base = 0;
  if (const Allocation* a = allocation_at(s, address, &base)) return a->kind == AllocationKind::host;
  if (const Mapping* m = mapping_at(s, address, &base)) return !m->physical->on_device;
  return !in_reservation(s, address, 1);
}

bool host_memory(std::uintptr_t address) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  std::uintptr_t base = 0;
  if (const Allocation* a = allocation_at(s, address, &base)) {
    return a->kind == AllocationKind::host || a->kind == AllocationKind::managed;
  }
  return mapping_at(s, address, &base) == nullptr && !in_reservation(s, address, 1);
}

bool pageable(std::uintptr_t address) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  std::uintptr_t base = 0;
  return allocation_at(s, address, &base) == nullptr && mapping_at(s, address, &base) == nullptr &&
         !in_reservation(s, address, 1);
}

CUresult after_faults(CUresult result) {
  const State& s = state();
  if (s.remap_faults.load() > 0 || s.access_faults.load() > 0 || s.unmapped_faults.load() > 0) {
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  return s.misaligned_faults.load() > 0 ? CUDA_ERROR_MISALIGNED_ADDRESS : result;
}

bool device_may_touch(int device, const std::vector<State::Touch>& touches) {
  State& s = state();
  if (s.device_count == 1) return true;  // one device reaches all there is; the host protection does the rest
  std::uintptr_t refused = 0;
  const char* why = nullptr;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    const std::uint64_t bit = std::uint64_t{1} << device;
    for (const State::Touch& t : touches) {
      std::uintptr_t base = 0;
      if (const Allocation* a = allocation_at(s, t.begin, &base)) {
        if (a->kind != AllocationKind::device || a->device == device) continue;
        if (a->pool != nullptr && (a->pool->access & bit) == 0) {
          refused = t.begin;
          why = "another device's memory-pool allocation, the pool's access not granted";
          break;
        }
        if (a->pool == nullptr && (s.peers[static_cast<std::size_t>(device)] & (std::uint64_t{1} << a->device)) == 0) {
          refused = t.begin;
          why = "another device's cuMemAlloc memory, peer access not enabled";
          break;
        }
      } else if (const Mapping* m = mapping_at(s, t.begin, &base)) {
        if (((m->readers | m->writers) & bit) == 0) {
          refused = t.begin;
          why = "a VMM mapping whose access list does not name the device";
          break;
        }
      }
    }
  }
  if (why == nullptr) return true;
  if (s.access_faults.fetch_add(1) == 0) {
    std::fprintf(stderr,
                 "tidepool sim: a kernel on device %d names %#llx, %s: on a GPU it faults "
                 "(CUDA_ERROR_ILLEGAL_ADDRESS, sticky)\n",
                 device, static_cast<unsigned long long>(refused), why);
  }
  return false;
}

bool any_host_mapped(const std::uint64_t* values, std::size_t count) {
  State& s = state();
  if (count == 0 || s.host_mappings.load() == 0) return false;
  std::lock_guard<std::mutex> guard(s.lock);
  for (std::size_t i = 0; i < count; ++i) {
    std::uintptr_t base = 0;
    const Mapping* m = mapping_at(s, static_cast<std::uintptr_t>(values[i]), &base);
    if (m != nullptr && !m->physical->on_device) return true;
  }
  return false;
}

bool host_mapped_in(std::uintptr_t address, std::size_t bytes) {
  State& s = state();
  if (bytes == 0 || s.host_mappings.load() == 0) return false;
  std::lock_guard<std::mutex> guard(s.lock);
  auto m = s.mappings.upper_bound(address);
  if (m != s.mappings.begin()) --m;
  for (; m != s.mappings.end() && m->first < address + bytes; ++m) {
    if (m->first + m->second.size <= address) continue;
    if (!m->second.physical->on_device) return true;
  }
  return false;
}

std::uintptr_t first_unreachable(const std::vector<State::Touch>& touches) {
  // Most kernels declare no extent: nothing to look up, no lock to take.
  if (std::none_of(touches.begin(), touches.end(),
                   [](const State::Touch& t) { return !t.guessed && t.end > t.begin; })) {
    return 0;
  }
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  for (const State::Touch& t : touches) {
    if (t.guessed || t.end <= t.begin) continue;
    auto r = s.reservations.upper_bound(t.begin);
    if (r != s.reservations.begin()) --r;
    for (; r != s.reservations.end() && r->first < t.end; ++r) {
      const std::uintptr_t lo = std::max(t.begin, r->first);
      const std::uintptr_t hi = std::min(t.end, r->first + r->second);
      for (std::uintptr_t at = lo; at < hi;) {
        std::uintptr_t base = 0;
        const Mapping* m = mapping_at(s, at, &base);
        if (m == nullptr || (t.write ? m->writers : m->readers | m->writers) == 0) return at;
        at = base + m->size;
      }
    }
  }
  return 0;
}

void settle_under_work() {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  std::lock_guard<std::mutex> running(s.running_lock);
  const auto touched = [&](const State::Touch& range) {
    return std::any_of(s.running.begin(), s.running.end(), [&](const State::RunningWork& work) {
      return std::any_of(work.touches.begin(), work.touches.end(),
                         [&](const State::Touch& t) { return t.meets(range.begin, range.end); });
    });
  };
  std::erase_if(s.scratch, [&](const State::Touch& scratch) {
    if (touched(scratch)) return false;
    // Only what is still reserved and unmapped: a later cuMemMap replaced
    // the scratch where it mapped, and a freed reservation leaves the
    // process below (freed_under_scratch).
    for (std::uintptr_t at = scratch.begin; at < scratch.end;) {
      std::uintptr_t base = 0;
      if (const Mapping* m = mapping_at(s, at, &base)) {
        at = base + m->size;
        continue;
      }
      auto next = s.mappings.lower_bound(at);
      const std::uintptr_t gap_end = next == s.mappings.end() ? scratch.end : std::min(scratch.end, next->first);
      for (std::uintptr_t page = at; page < gap_end; page += s.granularity) {
        if (in_reservation(s, page, s.granularity)) {
          map_fixed(page, s.granularity, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        }
      }
      at = gap_end;
    }
    return true;
  });
  std::erase_if(s.freed_under_scratch, [&](const State::Touch& freed) {
    const bool in_use = std::any_of(s.scratch.begin(), s.scratch.end(),
                                    [&](const State::Touch& t) { return t.meets(freed.begin, freed.end); });
    if (!in_use) ::munmap(reinterpret_cast<void*>(freed.begin), freed.end - freed.begin);
    return !in_use;
  });
  // Whatever is mapped there now takes the protection its access list gives
  // (an unmap since left it inaccessible or scratch: nothing to do).
  std::erase_if(s.access_kept, [&](const State::Touch& kept) {
    if (touched(kept)) return false;
    auto m = s.mappings.upper_bound(kept.begin);
    if (m != s.mappings.begin()) --m;
    for (; m != s.mappings.end() && m->first < kept.end; ++m) {
      if (m->first + m->second.size <= kept.begin) continue;
      (void)::mprotect(reinterpret_cast<void*>(m->first), m->second.size,
                       protection(m->second.readers, m->second.writers));
    }
    return true;
  });
  s.unsettled_ranges.store(s.scratch.size() + s.access_kept.size());
}

bool device_reachable(std::uintptr_t address, std::size_t bytes) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  std::uintptr_t base = 0;
  if (const Allocation* a = allocation_at(s, address, &base)) {
    // The stream memory operations refuse managed memory; an array's
    // storage is no pointer's.
    return a->kind != AllocationKind::managed && a->kind != AllocationKind::array && bytes <= base + a->size - address;
  }
  if (const Mapping* m = mapping_at(s, address, &base)) return bytes <= base + m->size - address;
  return false;
}

}  // namespace tidepool::sim

// --- address queries -----------------------------------------------------------------------------

namespace {

// What the driver knows of `address`: its range, kind and device. False when nothing.
bool lookup(std::uintptr_t address, std::uintptr_t* base, std::size_t* size, AllocationKind* kind,
            int* device = nullptr, std::uint64_t* buffer_id = nullptr) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  if (const Allocation* a = allocation_at(s, address, base); a != nullptr && a->kind != AllocationKind::array) {
    *size = a->size;
    *kind = a->kind;
    if (device != nullptr) *device = a->device;
    if (buffer_id != nullptr) *buffer_id = a->buffer_id;
    return true;
  }
  if (const Mapping* m = mapping_at(s, address, base)) {
    *size = m->size;
    *kind = m->physical->on_device ? AllocationKind::device : AllocationKind::host;
    if (device != nullptr) *device = m->physical->device;
    if (buffer_id != nullptr) *buffer_id = m->buffer_id;
    return true;
  }
  return false;
}

CUresult attribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  AllocationKind kind{};
  int device = 0;
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t buffer_id = 0;
  if (!lookup(static_cast<std::uintptr_t>(ptr), &base, &size, &kind, &device, &buffer_id)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) =
          reinterpret_cast<CUcontext>(state().contexts[static_cast<std::size_t>(device)].get());
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = kind == AllocationKind::host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = ptr; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (kind != AllocationKind::host) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = static_cast<CUdeviceptr>(base);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<std::size_t*>(data) = size; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = device; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned*>(data) = kind == AllocationKind::managed ? 1 : 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<unsigned*>(data) = 1; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = buffer_id; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: {
      // Null for memory no pool gave.
      State& s = state();
      std::lock_guard<std::mutex> guard(s.lock);
      std::uintptr_t at = 0;
      const Allocation* a = allocation_at(s, static_cast<std::uintptr_t>(ptr), &at);
      *static_cast<CUmemoryPool*>(data) = a != nullptr ? reinterpret_cast<CUmemoryPool>(a->pool) : nullptr;
      return CUDA_SUCCESS;
    }
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// The null value of each attribute, sized as the driver documents it.
void null_attribute(CUpointer_attribute attr, void* data) {
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data) = nullptr; return;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = -2; return;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = 0; return;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *static_cast<void**>(data) = nullptr; return;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<std::size_t*>(data) = 0; return;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = 0; return;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *static_cast<CUmemoryPool*>(data) = nullptr; return;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *static_cast<unsigned*>(data) = 0; return;
    default: return;
  }
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuMemGetAddressRange(CUdeviceptr* pbase, std::size_t* psize, CUdeviceptr ptr) {
  if (CUresult r = enter_initialized("cuMemGetAddressRange_v2"); r != CUDA_SUCCESS) return r;
  std::uintptr_t base = 0;
  std::size_t size = 0;
  AllocationKind kind{};
  if (!lookup(static_cast<std::uintptr_t>(ptr), &base, &size, &kind) || kind == AllocationKind::host) {
    return CUDA_ERROR_NOT_FOUND;
  }
  if (pbase != nullptr) *pbase = static_cast<CUdeviceptr>(base);
  if (psize != nullptr) *psize = size;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  if (CUresult r = enter_initialized("cuPointerGetAttribute"); r != CUDA_SUCCESS) return r;
  return attribute(data, attr, ptr);
}

TIDEPOOL_SIM_EXPORT CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attrs, void** data,
                                                    CUdeviceptr ptr) {
  if (CUresult r = enter_initialized("cuPointerGetAttributes"); r != CUDA_SUCCESS) return r;
  if (attrs == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // As the driver documents: an attribute the pointer has no value for (no
  // allocation there, or a host pointer of device memory) gets its null
  // value, and the call succeeds.
  for (unsigned i = 0; i < count; ++i) {
    if (data[i] == nullptr) continue;
    const CUresult r = attribute(data[i], attrs[i], ptr);
    if (r == CUDA_ERROR_INVALID_VALUE) {
      null_attribute(attrs[i], data[i]);
    } else if (r != CUDA_SUCCESS) {
      return r;
    }
  }
  return CUDA_SUCCESS;
}
