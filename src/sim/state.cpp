// The sim's global state, environment, fault injection, devices, contexts
// (one primary context per device, and those cuCtxCreate makes, each with
// its legacy stream), error names
// and the control API.
//
// Environment (read at cuInit):
//   TIDEPOOL_SIM_MEMORY       device capacity, e.g. 16GiB (default 16 GiB)
//   TIDEPOOL_SIM_GRANULARITY  VMM granularity (default 2 MiB)
//   TIDEPOOL_SIM_DEVICES      device count (default 1)
//   TIDEPOOL_SIM_FAULTS       name:nth:result,... e.g. cuMemCreate:3:2
//   TIDEPOOL_SIM_COPY_GBPS    host<->device copy bandwidth in GB/s (1e9 bytes/s),
//                             e.g. 25 or 0.5; unset, 0 or not a number: unlimited
//   TIDEPOOL_SIM_VMM_US       host µs per granularity page of each VMM call,
//                             e.g. create:14.5,map:1.3,access:33,unmap:22,release:16.4
//                             (an H100's), and host_create for a host-located
//                             create, which pins (create's when unset);
//                             unset or unknown names: free
//   TIDEPOOL_SIM_CALL_NS      host ns a named entry point takes per call,
//                             e.g. cuEventRecord:217,cuEventQuery:1243 (an
//                             H200's); unset: the sim's own cost only
#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>

#include "sim/sim.hpp"

namespace tidepool::sim {

namespace {

// Sizes like "16GiB", "512MiB", "4096". The sim cannot link tidepool's core,
// so it carries this small parser of its own.
std::size_t parse_bytes(const char* text, std::size_t fallback) {
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || value < 0) return fallback;
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double scale = 1;
  if (unit == "KiB" || unit == "K")
    scale = 1024.0;
  else if (unit == "MiB" || unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "TiB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB")
    scale = 1e3;
  else if (unit == "MB")
    scale = 1e6;
  else if (unit == "GB")
    scale = 1e9;
  else if (!unit.empty() && unit != "B")
    return fallback;
  return static_cast<std::size_t>(value * scale);
}

// Calls on_item(item) for each comma-separated item of `text` (null: none).
template <typename F>
void for_each_item(const char* text, F&& on_item) {
  if (text == nullptr) return;
  const std::string spec(text);
  std::size_t start = 0;
  while (start < spec.size()) {
    std::size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    on_item(spec.substr(start, comma - start));
    start = comma + 1;
  }
}

void parse_faults(State& s, const char* text) {
  for_each_item(text, [&](const std::string& item) {
    const std::size_t a = item.find(':');
    const std::size_t b = item.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) return;
    const unsigned nth = static_cast<unsigned>(std::strtoul(item.c_str() + a + 1, nullptr, 10));
    const auto result = static_cast<CUresult>(std::strtol(item.c_str() + b + 1, nullptr, 10));
    if (nth > 0) s.faults[item.substr(0, a)] = Fault{nth, result};
  });
}

// A bandwidth in GB/s. Anything but a whole non-negative finite number is
// ignored (unlimited): the sim has no channel to complain on that a program
// under test would not see as its own output.
double parse_gbps(const char* text) {
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text) return 0;
  while (*end == ' ') ++end;
  if (*end != '\0' || !std::isfinite(value) || value < 0) return 0;
  return value;
}

}  // namespace

void set_vmm_us(State& s, const char* text) {
  for (auto& us : s.vmm_us) us.store(0);
  constexpr std::array<std::string_view, 6> kNames{"create", "map", "access", "unmap", "release", "host_create"};
  for_each_item(text, [&](const std::string& item) {
    const std::size_t colon = item.find(':');
    if (colon == std::string::npos) return;
    const double us = parse_gbps(item.c_str() + colon + 1);  // the same grammar: a finite number >= 0
    for (std::size_t i = 0; i < kNames.size(); ++i) {
      if (item.compare(0, colon, kNames[i]) == 0) s.vmm_us[i].store(us);
    }
  });
}

void set_call_ns(State& s, const char* text) {
  std::lock_guard<std::mutex> guard(s.lock);
  s.call_ns.clear();
  for_each_item(text, [&](const std::string& item) {
    const std::size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0) return;
    const double ns = parse_gbps(item.c_str() + colon + 1);  // the same grammar: a finite number >= 0
    if (ns > 0) s.call_ns[item.substr(0, colon)] = ns;
  });
  s.any_call_ns.store(!s.call_ns.empty());
}

namespace {

// The calling thread's own work for `ns`: spun, not slept, since a sleep
// this short would oversleep.
void spin_for(double ns) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::nano>(ns);
  while (std::chrono::steady_clock::now() < until) {
  }
}

void configure_from_environment(State& s) {
  s.capacity = parse_bytes(std::getenv("TIDEPOOL_SIM_MEMORY"), std::size_t{16} << 30);
  s.granularity = parse_bytes(std::getenv("TIDEPOOL_SIM_GRANULARITY"), std::size_t{2} << 20);
  if (s.granularity == 0 || (s.granularity & (s.granularity - 1)) != 0 || s.granularity % 4096 != 0) {
    s.granularity = std::size_t{2} << 20;
  }
  const char* devices = std::getenv("TIDEPOOL_SIM_DEVICES");
  // At most 64: access lists and peer sets are one bit per device.
  s.device_count = devices != nullptr ? std::clamp(std::atoi(devices), 1, 64) : 1;
  s.peers.assign(static_cast<std::size_t>(s.device_count), 0);
  for (int d = 0; d < s.device_count; ++d) {
    auto pool = std::make_unique<MemPool>();
    pool->device = d;
    pool->is_default = true;
    s.default_pools.push_back(pool.get());
    s.live_pools.insert(pool.get());
    s.pools[pool.get()] = std::move(pool);
  }
  s.current_pools = s.default_pools;
  parse_faults(s, std::getenv("TIDEPOOL_SIM_FAULTS"));
  s.copy_gbps.store(parse_gbps(std::getenv("TIDEPOOL_SIM_COPY_GBPS")));
  if (const char* depth = std::getenv("TIDEPOOL_SIM_QUEUE_DEPTH");
      depth != nullptr && *depth >= '0' && *depth <= '9') {  // digits only: strtoull would wrap " -5"
    char* end = nullptr;
    const unsigned long long value = std::strtoull(depth, &end, 10);
    if (end != nullptr && *end == '\0') s.queue_depth.store(static_cast<std::size_t>(value));
  }
  set_vmm_us(s, std::getenv("TIDEPOOL_SIM_VMM_US"));
  set_call_ns(s, std::getenv("TIDEPOOL_SIM_CALL_NS"));
}

}  // namespace

void vmm_delay(VmmCall call, std::size_t bytes) {
  const State& s = state();
  double us = s.vmm_us[static_cast<std::size_t>(call)].load(std::memory_order_relaxed);
  if (call == VmmCall::host_create && us <= 0) {
    us = s.vmm_us[static_cast<std::size_t>(VmmCall::create)].load(std::memory_order_relaxed);
  }
  if (us <= 0) return;
  const std::size_t pages = std::max<std::size_t>(1, bytes / s.granularity);
  spin_for(us * 1000.0 * static_cast<double>(pages));
}

State& state() {
  // Leaked: driver calls may come from static destructors of the host, and
  // stream workers use it (progress, streams, events) until the process is
  // gone, so nothing they touch is destroyed at exit.
  static State* s = [] {
    auto* created = new State();
    configure_from_environment(*created);
    // Names this process's legacy IPC memory (State::ipc_nonce).
    if (::getrandom(&created->ipc_nonce, sizeof created->ipc_nonce, 0) != sizeof created->ipc_nonce) {
      created->ipc_nonce = static_cast<std::uint64_t>(now_ns()) ^ (static_cast<std::uint64_t>(::getpid()) << 40);
    }
    for (int d = 0; d < created->device_count; ++d) {
      created->contexts.push_back(std::make_unique<Context>());
      Context* context = created->contexts.back().get();
      context->device = d;
      context->legacy = std::make_shared<Stream>(0, true, context);
    }
    return created;
  }();
  return *s;
}

// The real driver is unusable in a child forked after cuInit: every call
// there fails with CUDA_ERROR_NOT_INITIALIZED (the error names still
// answer). The sim does the same, and must: its stream threads stayed in the
// parent, and its lock may have been held by one of them at the fork.
std::atomic<bool> initialized_once{false};
std::atomic<bool> forked_after_init{false};

void on_fork_child() {
  if (initialized_once.load(std::memory_order_relaxed)) forked_after_init.store(true, std::memory_order_relaxed);
}

CUresult enter(const char* name) {
  if (forked_after_init.load(std::memory_order_relaxed) && std::strcmp(name, "cuGetErrorName") != 0 &&
      std::strcmp(name, "cuGetErrorString") != 0) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  State& s = state();
  int signal_now = 0;
  CUresult result = CUDA_SUCCESS;
  double cost_ns = 0;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    s.calls[name]++;
    if (s.any_call_ns.load(std::memory_order_relaxed)) {
      if (auto it = s.call_ns.find(name); it != s.call_ns.end()) cost_ns = it->second;
    }
    if (auto it = s.faults.find(name); it != s.faults.end() && --it->second.countdown == 0) {
      result = it->second.result;
      s.faults.erase(it);
    }
    if (auto it = s.signals.find(name); it != s.signals.end() && --it->second.countdown == 0) {
      signal_now = static_cast<int>(it->second.result);
      s.signals.erase(it);
    }
  }
  // Outside the sim's lock: the handler may call anything, exit() included;
  // and the call's own cost is the calling thread's, not the sim's.
  if (cost_ns > 0) spin_for(cost_ns);
  if (signal_now != 0) ::raise(signal_now);
  return result;
}

CUresult enter_initialized(const char* name) {
  if (CUresult r = enter(name); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  return s.initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

Context*& current_context() {
  thread_local Context* current = nullptr;
  return current;
}

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

namespace {

Context* context_of_device(CUdevice device) {
  State& s = state();
  if (device < 0 || device >= s.device_count) return nullptr;
  return s.contexts[static_cast<std::size_t>(device)].get();
}

bool valid_context(CUcontext ctx) {
  State& s = state();
  for (auto& c : s.contexts) {
    if (reinterpret_cast<CUcontext>(c.get()) == ctx) return true;
  }
  std::lock_guard<std::mutex> guard(s.contexts_lock);
  for (auto& c : s.created_contexts) {
    if (reinterpret_cast<CUcontext>(c.get()) == ctx) return !c->destroyed;
  }
  return false;
}

// cuCtxCreate in each ABI: a context of the device's own, with its own
// legacy stream, made current (the sim's context stack is one deep).
CUresult create_context(CUcontext* ctx, unsigned flags, CUdevice device) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (context_of_device(device) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  auto made = std::make_unique<Context>();
  made->device = device;
  made->created = true;
  made->legacy = std::make_shared<Stream>(0, true, made.get());
  Context* raw = made.get();
  {
    std::lock_guard<std::mutex> guard(s.contexts_lock);
    s.created_contexts.push_back(std::move(made));
  }
  current_context() = raw;
  *ctx = reinterpret_cast<CUcontext>(raw);
  return CUDA_SUCCESS;
}

}  // namespace

}  // namespace tidepool::sim

using namespace tidepool::sim;  // NOLINT(google-build-using-namespace): exported C entry points below

// --- initialisation, devices, contexts --------------------------------------------------

TIDEPOOL_SIM_EXPORT CUresult cuInit(unsigned int flags) {
  if (CUresult r = enter("cuInit"); r != CUDA_SUCCESS) return r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  s.initialized = true;
  if (!initialized_once.exchange(true)) ::pthread_atfork(nullptr, nullptr, &on_fork_child);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (CUresult r = enter("cuDriverGetVersion"); r != CUDA_SUCCESS) return r;
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (CUresult r = enter_initialized("cuDeviceGetCount"); r != CUDA_SUCCESS) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = state().device_count;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = enter_initialized("cuDeviceGet"); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= state().device_count) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuDeviceGetName(char* name, int length, CUdevice device) {
  if (CUresult r = enter_initialized("cuDeviceGetName"); r != CUDA_SUCCESS) return r;
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (context_of_device(device) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<std::size_t>(length), "tidepool simulated device %d", device);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuDeviceTotalMem(std::size_t* bytes, CUdevice device) {
  if (CUresult r = enter_initialized("cuDeviceTotalMem_v2"); r != CUDA_SUCCESS) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (context_of_device(device) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> guard(state().lock);
  *bytes = state().capacity;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  if (CUresult r = enter_initialized("cuDeviceGetAttribute"); r != CUDA_SUCCESS) return r;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (context_of_device(device) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    // cuMemCreate's requestedHandleTypes and cuMemExportToShareableHandle
    // (see memory.cpp); CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED stays 0:
    // interprocess events are not simulated.
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    // cuStreamWaitValue32/64 (every condition) and cuStreamWriteValue32/64.
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: *value = 1; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: *value = 0; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: *value = 512; return CUDA_SUCCESS;
    default: *value = 0; return CUDA_SUCCESS;
  }
}

TIDEPOOL_SIM_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  if (CUresult r = enter_initialized("cuDevicePrimaryCtxRetain"); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = context_of_device(device);
  if (c == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> guard(state().lock);
  c->retain_count++;
  *ctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice device) {
  if (CUresult r = enter_initialized("cuDevicePrimaryCtxRelease_v2"); r != CUDA_SUCCESS) return r;
  Context* c = context_of_device(device);
  if (c == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> guard(state().lock);
  if (c->retain_count == 0) return CUDA_ERROR_INVALID_CONTEXT;
  c->retain_count--;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned int* flags, int* active) {
  if (CUresult r = enter_initialized("cuDevicePrimaryCtxGetState"); r != CUDA_SUCCESS) return r;
  Context* c = context_of_device(device);
  if (c == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(state().lock);
  *flags = 0;
  *active = c->retain_count > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (CUresult r = enter_initialized("cuCtxGetCurrent"); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = reinterpret_cast<CUcontext>(current_context());
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (CUresult r = enter_initialized("cuCtxSetCurrent"); r != CUDA_SUCCESS) return r;
  if (ctx != nullptr && !valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  current_context() = reinterpret_cast<Context*>(ctx);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) {
  if (CUresult r = enter_initialized("cuCtxPushCurrent_v2"); r != CUDA_SUCCESS) return r;
  // The sim keeps a one-deep stack: enough for tidepool and its tests.
  if (ctx != nullptr && !valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  current_context() = reinterpret_cast<Context*>(ctx);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice device) {
  if (CUresult r = enter_initialized("cuCtxCreate_v2"); r != CUDA_SUCCESS) return r;
  return create_context(ctx, flags, device);
}

TIDEPOOL_SIM_EXPORT CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* affinity, int count,
                                            unsigned int flags, CUdevice device) {
  if (CUresult r = enter_initialized("cuCtxCreate_v3"); r != CUDA_SUCCESS) return r;
  if (count < 0 || (count > 0 && affinity == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (count > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;  // the sim's devices have no SM partitions
  return create_context(ctx, flags, device);
}

TIDEPOOL_SIM_EXPORT CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params, unsigned int flags,
                                            CUdevice device) {
  if (CUresult r = enter_initialized("cuCtxCreate_v4"); r != CUDA_SUCCESS) return r;
  if (params != nullptr && (params->execAffinityParams != nullptr || params->cigParams != nullptr)) {
    return CUDA_ERROR_NOT_SUPPORTED;  // no SM partitions, no shared graphics context
  }
  return create_context(ctx, flags, device);
}

// Waits for the context's work, then refuses its handle from then on; a
// thread that had it current has none. A primary context is not the
// program's to destroy.
TIDEPOOL_SIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  if (CUresult r = enter_initialized("cuCtxDestroy_v2"); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr || !valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  auto* context = reinterpret_cast<Context*>(ctx);
  if (!context->created) return CUDA_ERROR_INVALID_CONTEXT;
  synchronize_context(context);
  {
    std::lock_guard<std::mutex> guard(state().contexts_lock);
    context->destroyed = true;
  }
  if (current_context() == context) current_context() = nullptr;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuCtxPopCurrent(CUcontext* ctx) {
  if (CUresult r = enter_initialized("cuCtxPopCurrent_v2"); r != CUDA_SUCCESS) return r;
  if (current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx != nullptr) *ctx = reinterpret_cast<CUcontext>(current_context());
  current_context() = nullptr;
  return CUDA_SUCCESS;
}

namespace {

// CUDA 13's _v2 forms name their context; null means the current one.
Context* named_or_current(CUcontext ctx) {
  if (ctx == nullptr) return current_context();
  return valid_context(ctx) ? reinterpret_cast<Context*>(ctx) : nullptr;
}

CUresult context_device(Context* context, CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = context->device;
  return CUDA_SUCCESS;
}

CUresult context_synchronize(Context* context) {
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // Potentially unsafe during capture; and it would wait on any capture of
  // this context, whatever the mode.
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_context_sync(context); r != CUDA_SUCCESS) return r;
  synchronize_context(context);
  return CUDA_SUCCESS;
}

}  // namespace

// --- peer access ---------------------------------------------------------------------------

TIDEPOOL_SIM_EXPORT CUresult cuDeviceCanAccessPeer(int* can, CUdevice device, CUdevice peer) {
  if (CUresult r = enter_initialized("cuDeviceCanAccessPeer"); r != CUDA_SUCCESS) return r;
  if (can == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (context_of_device(device) == nullptr || context_of_device(peer) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *can = device != peer ? 1 : 0;  // every pair of simulated devices is linked
  return CUDA_SUCCESS;
}

namespace {

// cuCtxEnablePeerAccess / cuCtxDisablePeerAccess: the current context's
// device gains or loses access to `peer`'s device's cuMemAlloc memory.
CUresult change_peer_access(CUcontext peer, bool enable) {
  Context* accessor = current_context();
  if (accessor == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (peer == nullptr || !valid_context(peer)) return CUDA_ERROR_INVALID_CONTEXT;
  const int owner = reinterpret_cast<Context*>(peer)->device;
  if (owner == accessor->device) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  std::uint64_t& peers = s.peers[static_cast<std::size_t>(accessor->device)];
  const std::uint64_t bit = std::uint64_t{1} << owner;
  if (enable && (peers & bit) != 0) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  if (!enable && (peers & bit) == 0) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  peers ^= bit;
  return CUDA_SUCCESS;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  if (CUresult r = enter_initialized("cuCtxEnablePeerAccess"); r != CUDA_SUCCESS) return r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return change_peer_access(peer, true);
}

TIDEPOOL_SIM_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peer) {
  if (CUresult r = enter_initialized("cuCtxDisablePeerAccess"); r != CUDA_SUCCESS) return r;
  return change_peer_access(peer, false);
}

TIDEPOOL_SIM_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  if (CUresult r = enter_initialized("cuCtxGetDevice"); r != CUDA_SUCCESS) return r;
  return context_device(current_context(), device);
}

// What cuGetProcAddress("cuCtxGetDevice") hands out at CUDA 13.0 and later.
TIDEPOOL_SIM_EXPORT CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (CUresult r = enter_initialized("cuCtxGetDevice_v2"); r != CUDA_SUCCESS) return r;
  return context_device(named_or_current(ctx), device);
}

TIDEPOOL_SIM_EXPORT CUresult cuCtxSynchronize() {
  if (CUresult r = enter_initialized("cuCtxSynchronize"); r != CUDA_SUCCESS) return r;
  return after_faults(context_synchronize(current_context()));
}

// What cuGetProcAddress("cuCtxSynchronize") hands out at CUDA 13.0 and later.
TIDEPOOL_SIM_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  if (CUresult r = enter_initialized("cuCtxSynchronize_v2"); r != CUDA_SUCCESS) return r;
  return after_faults(context_synchronize(named_or_current(ctx)));
}

// --- errors ----------------------------------------------------------------------------------

namespace {

CUresult error_name(CUresult error, const char** name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; break;
    case CUDA_ERROR_NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_NOT_READY: *name = "CUDA_ERROR_NOT_READY"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *name = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_ALREADY_MAPPED: *name = "CUDA_ERROR_ALREADY_MAPPED"; break;
    case CUDA_ERROR_NOT_MAPPED: *name = "CUDA_ERROR_NOT_MAPPED"; break;
    case CUDA_ERROR_ILLEGAL_STATE: *name = "CUDA_ERROR_ILLEGAL_STATE"; break;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: *name = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; break;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: *name = "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"; break;
    case CUDA_ERROR_STREAM_CAPTURE_MERGE: *name = "CUDA_ERROR_STREAM_CAPTURE_MERGE"; break;
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: *name = "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"; break;
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED: *name = "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"; break;
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION: *name = "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"; break;
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: *name = "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"; break;
    case CUDA_ERROR_CAPTURED_EVENT: *name = "CUDA_ERROR_CAPTURED_EVENT"; break;
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: *name = "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"; break;
    default: *name = "CUDA_ERROR_UNKNOWN"; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuGetErrorName(CUresult error, const char** name) {
  if (CUresult r = enter("cuGetErrorName"); r != CUDA_SUCCESS) return r;
  return error_name(error, name);
}

TIDEPOOL_SIM_EXPORT CUresult cuGetErrorString(CUresult error, const char** text) {
  if (CUresult r = enter("cuGetErrorString"); r != CUDA_SUCCESS) return r;
  return error_name(error, text);
}

// --- control API --------------------------------------------------------------------------------

TIDEPOOL_SIM_EXPORT void tidepool_sim_inject_fault(const char* name, unsigned nth, CUresult result) {
  if (name == nullptr || nth == 0) return;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  s.faults[name] = Fault{nth, result};
}

TIDEPOOL_SIM_EXPORT void tidepool_sim_clear_faults(void) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  s.faults.clear();
  s.signals.clear();
  s.remap_faults.store(0);
  s.access_faults.store(0);
  s.unmapped_faults.store(0);
  s.misaligned_faults.store(0);
}

TIDEPOOL_SIM_EXPORT void tidepool_sim_raise_in(const char* name, unsigned nth, int signal) {
  if (name == nullptr || nth == 0 || signal <= 0) return;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  s.signals[name] = Fault{nth, static_cast<CUresult>(signal)};
}

TIDEPOOL_SIM_EXPORT void tidepool_sim_set_capacity(std::size_t bytes) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  s.capacity = bytes;
}

TIDEPOOL_SIM_EXPORT void tidepool_sim_set_records_wait(int on) {
  state().records_wait.store(on != 0, std::memory_order_relaxed);
}

TIDEPOOL_SIM_EXPORT std::size_t tidepool_sim_capacity(void) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  return s.capacity;
}

TIDEPOOL_SIM_EXPORT std::size_t tidepool_sim_device_bytes_in_use(void) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  return s.device_used;
}

TIDEPOOL_SIM_EXPORT std::size_t tidepool_sim_host_bytes_in_use(void) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  return s.host_used;
}

TIDEPOOL_SIM_EXPORT std::uint64_t tidepool_sim_call_count(const char* name) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.calls.find(name != nullptr ? name : "");
  return it == s.calls.end() ? 0 : it->second;
}

TIDEPOOL_SIM_EXPORT void tidepool_sim_set_vmm_us(const char* spec) { set_vmm_us(state(), spec); }

TIDEPOOL_SIM_EXPORT void tidepool_sim_set_call_ns(const char* spec) { set_call_ns(state(), spec); }

TIDEPOOL_SIM_EXPORT void tidepool_sim_set_queue_depth(size_t depth) { state().queue_depth.store(depth); }

TIDEPOOL_SIM_EXPORT size_t tidepool_sim_queue_depth(void) { return state().queue_depth.load(); }

TIDEPOOL_SIM_EXPORT void tidepool_sim_set_copy_gbps(double gbps) {
  state().copy_gbps.store(std::isfinite(gbps) && gbps > 0 ? gbps : 0);
}

TIDEPOOL_SIM_EXPORT std::uint64_t tidepool_sim_copied_bytes(int to_device) {
  const State& s = state();
  return (to_device != 0 ? s.copied_to_device : s.copied_to_host).load();
}

TIDEPOOL_SIM_EXPORT std::uint64_t tidepool_sim_remap_faults(void) { return state().remap_faults.load(); }

TIDEPOOL_SIM_EXPORT std::uint64_t tidepool_sim_access_faults(void) { return state().access_faults.load(); }
TIDEPOOL_SIM_EXPORT std::uint64_t tidepool_sim_unmapped_faults(void) { return state().unmapped_faults.load(); }
TIDEPOOL_SIM_EXPORT std::uint64_t tidepool_sim_misaligned_faults(void) { return state().misaligned_faults.load(); }

TIDEPOOL_SIM_EXPORT std::uint64_t tidepool_sim_host_resident_launches(void) {
  return state().host_resident_launches.load();
}

TIDEPOOL_SIM_EXPORT std::uint64_t tidepool_sim_host_resident_graph_copies(void) {
  return state().host_resident_graph_copies.load();
}

TIDEPOOL_SIM_EXPORT std::uint64_t tidepool_sim_host_resident_copies(CUstream handle) {
  std::shared_ptr<Stream> stream;
  if (resolve_stream(handle, &stream) != CUDA_SUCCESS) return 0;
  return stream->host_resident_copies->load();
}
