// The fault sweep's workload: one process, one injected driver fault.
//
//   fault_workload MODE [NAME N]     MODE: pool | evict
//
// Arms "the N-th call tidepool makes to the driver entry point NAME fails"
// before anything touches the driver, then drives libtidepool.so through its
// C API as an application would (linked, so its stream hooks stand in front):
// mixed sizes, cudaFree-style and stream-ordered, on several streams whose
// queued sim "kernels" write and check every block, a stream destroyed with
// frees pending on it, trims, and a budget change (MODE evict: evict:on and prefetch:launch, a budget below what is
// live, so the host cache, remaps, copies, gates and launch scans run). Every block allocated and written must read
// back its pattern until freed, whatever the API returned; afterwards a fresh round must succeed and the sim's device
// bytes must come back to what the pool says it reserves.
//
// Prints "COUNT name total own" for every entry point of the driver table and
// one line "RESULT outcome=... reached=0|1 errors=n first_error=... detail=..."
// and exits 0 (outcome ok), 3 (corrupt), 4 (broken) or 5 (leak).
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "driver/entry_points.hpp"
#include "sim/sim_control.h"
#include "support/block_pattern.hpp"
#include "tidepool/tidepool.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// What the injected call returns: what a driver says when that kind of call
// fails for real. Allocation and mapping calls run out of memory; everything
// else fails with a launch failure (the sticky error of a faulting kernel,
// which the driver reports from whatever call comes next) or, for calls that
// queue no work, an unknown error.
CUresult realistic_error(const std::string& name) {
  static const char* const kOutOfMemory[] = {"cuMemCreate",    "cuMemAlloc_v2",       "cuMemAllocPitch_v2",
                                             "cuMemMap",       "cuMemAddressReserve", "cuMemAllocHost_v2",
                                             "cuMemHostAlloc", "cuMemAllocAsync",     "cuMemSetAccess"};
  for (const char* n : kOutOfMemory) {
    if (name == n) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  static const char* const kLaunchFailure[] = {"cuStreamSynchronize",  "cuEventSynchronize",   "cuCtxSynchronize",
                                               "cuEventQuery",         "cuStreamQuery",        "cuMemcpyAsync",
                                               "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2"};
  for (const char* n : kLaunchFailure) {
    if (name == n) return CUDA_ERROR_LAUNCH_FAILED;
  }
  return CUDA_ERROR_UNKNOWN;
}

// --- the driver, as the application sees it -------------------------------------------------

struct Sim {
  void* handle = nullptr;
  decltype(&::tidepool_sim_inject_fault) inject = nullptr;
  decltype(&::tidepool_sim_call_count) count = nullptr;
  decltype(&::tidepool_sim_register_kernel) register_kernel = nullptr;
  decltype(&::tidepool_sim_device_bytes_in_use) device_bytes = nullptr;
  decltype(&::tidepool_sim_host_bytes_in_use) host_bytes = nullptr;
  decltype(&::tidepool_sim_copied_bytes) copied = nullptr;
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) ctx_retain = nullptr;
  decltype(&::cuCtxSetCurrent) ctx_set = nullptr;
  decltype(&::cuStreamCreate) stream_create = nullptr;
  CUresult (*stream_destroy)(CUstream) = nullptr;
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**,
                     void**) = nullptr;
};

Sim sim;

template <typename Fn>
bool bind(const char* name, Fn* slot) {
  *slot = reinterpret_cast<Fn>(::dlsym(sim.handle, name));
  if (*slot == nullptr) std::fprintf(stderr, "fault_workload: the sim does not export %s\n", name);
  return *slot != nullptr;
}

// The injected fault, aimed at tidepool's calls: the sim counts every call
// to NAME, the application's own included, so before each of our own calls
// to NAME (while the fault is still ahead) it is re-armed one call later.
struct Fault {
  std::string name;
  unsigned nth = 0;
  CUresult result = CUDA_SUCCESS;
};

Fault fault;
std::map<std::string, std::uint64_t> own_calls;

std::uint64_t tidepool_calls(const std::string& name) {
  const std::uint64_t total = sim.count(name.c_str());
  const std::uint64_t own = own_calls[name];
  return total > own ? total - own : 0;
}

bool fault_reached() { return !fault.name.empty() && tidepool_calls(fault.name) >= fault.nth; }

// --- what the run saw -----------------------------------------------------------------------

struct Outcome {
  unsigned errors = 0;      // tidepool API calls that returned an error
  std::string first_error;  // "api:status" of the first
  std::string corrupt;      // first data check that failed
  std::string broken;       // first sign the allocator stopped working
  std::atomic<std::uint64_t> kernel_mismatches{0};
};

Outcome outcome;

void note_error(const char* api, tidepool_status s) {
  if (outcome.errors++ == 0) outcome.first_error = std::string(api) + ":" + tidepool_status_string(s);
}
void note_corrupt(const std::string& what) {
  if (outcome.corrupt.empty()) outcome.corrupt = what;
}
void note_broken(const std::string& what) {
  if (outcome.broken.empty()) outcome.broken = what;
}

// One of the application's own driver calls.
template <typename Call>
CUresult own(const char* name, Call&& call) {
  if (name == fault.name) {
    const std::uint64_t seen = tidepool_calls(fault.name);
    if (seen < fault.nth) sim.inject(name, static_cast<unsigned>(fault.nth - seen + 1), fault.result);
  }
  ++own_calls[name];
  const CUresult r = call();
  // Our own calls never carry the fault, so a failure is tidepool's doing
  // (a hook in front of the driver that got it wrong).
  if (r != CUDA_SUCCESS) note_broken(std::string("application's ") + name + " failed: " + std::to_string(r));
  return r;
}

// --- kernels on the sim's stream workers ----------------------------------------------------

void fill_kernel(void** params, void*) {
  auto* words = *static_cast<std::uint64_t**>(params[0]);
  const auto count = *static_cast<std::size_t*>(params[1]);
  const auto tag = *static_cast<std::uint64_t*>(params[2]);
  tidepool::testing::fill_pattern(words, count, tag);
}

void check_kernel(void** params, void*) {
  const auto* words = *static_cast<const std::uint64_t**>(params[0]);
  const auto count = *static_cast<std::size_t*>(params[1]);
  const auto tag = *static_cast<std::uint64_t*>(params[2]);
  if (!tidepool::testing::holds_pattern(words, count, tag)) outcome.kernel_mismatches.fetch_add(1);
}

void signal_kernel(void** params, void*) { (*static_cast<std::atomic<int>**>(params[0]))->store(1); }

struct Kernels {
  CUfunction fill = nullptr;
  CUfunction check = nullptr;
  CUfunction signal = nullptr;
};

Kernels kernels;

bool register_kernels() {
  const std::size_t fill[] = {sizeof(void*), sizeof(std::size_t), sizeof(std::uint64_t)};
  const std::size_t signal[] = {sizeof(void*)};
  return sim.register_kernel(&kernels.fill, &fill_kernel, nullptr, 3, fill) == CUDA_SUCCESS &&
         sim.register_kernel(&kernels.check, &check_kernel, nullptr, 3, fill) == CUDA_SUCCESS &&
         sim.register_kernel(&kernels.signal, &signal_kernel, nullptr, 1, signal) == CUDA_SUCCESS;
}

bool launch(CUfunction f, CUstream stream, void** params) {
  return own("cuLaunchKernel", [&] { return sim.launch(f, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr); }) ==
         CUDA_SUCCESS;
}

// --- the workload ---------------------------------------------------------------------------

struct Block {
  std::uint64_t* words = nullptr;
  std::size_t bytes = 0;
  std::uint64_t tag = 0;
  CUstream stream = nullptr;
  bool ordered = false;
};

class Workload {
 public:
  explicit Workload(bool evict) : evict_(evict) {}

  bool setup() {
    CUdevice device = 0;
    CUcontext context = nullptr;
    if (own("cuInit", [] { return sim.init(0); }) != CUDA_SUCCESS) return false;
    if (own("cuDeviceGet", [&] { return sim.device_get(&device, 0); }) != CUDA_SUCCESS) return false;
    if (own("cuDevicePrimaryCtxRetain", [&] { return sim.ctx_retain(&context, device); }) != CUDA_SUCCESS) {
      return false;
    }
    if (own("cuCtxSetCurrent", [&] { return sim.ctx_set(context); }) != CUDA_SUCCESS) return false;
    // One blocking stream (ordered with the legacy stream), two not.
    for (int i = 0; i < 3; ++i) {
      if (!create_stream(i, i == 0 ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING)) return false;
    }
    return true;
  }

  void run() {
    // Round 1: a mix, half of it freed, then more on top (reuse of deferred
    // and stream-ordered frees, on the same stream and across streams).
    for (int i = 0; i < 16; ++i) allocate(pick_size(i), streams_[i % 3], i % 2 == 1);
    check_all("after the first allocations");
    for (std::size_t i = 0; i < live_.size();) {
      if (i % 2 == 0) {
        release(i, (i / 2) % 3 == 0 ? streams_[(i + 1) % 3] : live_[i].stream);
      } else {
        ++i;
      }
    }
    for (int i = 0; i < 10; ++i) allocate(pick_size(i + 16), streams_[(i + 1) % 3], i % 3 != 0);
    check_all("after reuse");

    // A stream destroyed with stream-ordered frees still pending on it.
    for (std::size_t i = 0; i < live_.size();) {
      if (live_[i].stream == streams_[2]) {
        release(i, streams_[2]);
      } else {
        ++i;
      }
    }
    if (own("cuStreamDestroy_v2", [&] { return sim.stream_destroy(streams_[2]); }) == CUDA_SUCCESS) {
      streams_[2] = nullptr;
      create_stream(2, CU_STREAM_NON_BLOCKING);
    }
    for (int i = 0; i < 6; ++i) allocate(pick_size(i + 40), streams_[i % 3], i % 2 == 0);
    trim();
    check_all("after a stream's destruction and a trim");

    budget_round();

    // Everything goes; a failed free is the application's to try again.
    release_all();
    for (int attempt = 0; attempt < 2 && !unfreed_.empty(); ++attempt) retry_frees();
    if (!unfreed_.empty()) note_broken("a block could not be freed after a retry");
    set_limit(0);
    trim();
    drain();
  }

  // After the fault: the allocator must still do everything it did before.
  // A round the fault itself lands in may fail with an error (strict off);
  // the round after it must not.
  void fresh_round(bool strict) {
    const unsigned errors_before = outcome.errors;
    for (int i = 0; i < 8; ++i) allocate(pick_size(i + 100), streams_[i % 3], i % 2 == 0);
    check_all("in the fresh round");
    release_all();
    for (int attempt = 0; attempt < 2 && !unfreed_.empty(); ++attempt) retry_frees();
    drain();
    if (strict && outcome.errors != errors_before) note_broken("the fresh round failed: " + last_error_);
    if (!unfreed_.empty()) note_broken("a block of the fresh round could not be freed");
  }

  // The sim's device bytes against what the pool says it holds.
  void check_leak(std::string* leak) {
    trim();
    drain();
    tidepool_stats s{};
    if (tidepool_get_stats(0, &s) != TIDEPOOL_OK) {
      note_broken("tidepool_get_stats failed at the end");
      return;
    }
    if (s.live_bytes != 0) note_broken("live bytes after every free: " + std::to_string(s.live_bytes));
    const std::size_t device = sim.device_bytes();
    if (device > s.reserved_bytes) {
      *leak = "sim device bytes " + std::to_string(device) + " > pool reserved " + std::to_string(s.reserved_bytes);
    }
  }

  bool evicted() const { return evicted_; }

 private:
  bool create_stream(int i, unsigned flags) {
    return own("cuStreamCreate", [&] { return sim.stream_create(&streams_[i], flags); }) == CUDA_SUCCESS;
  }

  // Small (packed on shared pages), medium, and large enough to have whole
  // pages of their own (what eviction can move).
  std::size_t pick_size(int i) {
    std::size_t bytes = 0;
    switch (i % 4) {
      case 0:
      case 2: bytes = std::uniform_int_distribution<std::size_t>(512, 96 << 10)(rng_); break;
      case 1: bytes = std::uniform_int_distribution<std::size_t>(200 << 10, 3 * kMiB / 2)(rng_); break;
      default: bytes = std::uniform_int_distribution<std::size_t>(5 * kMiB / 2, 6 * kMiB)(rng_); break;
    }
    return (bytes + 7) & ~std::size_t{7};
  }

  bool allocate(std::size_t bytes, CUstream stream, bool ordered) {
    void* p = nullptr;
    const tidepool_status s = ordered ? tidepool_malloc_async(&p, bytes, 0, stream) : tidepool_malloc(&p, bytes, 0);
    if (s != TIDEPOOL_OK) {
      failed(ordered ? "tidepool_malloc_async" : "tidepool_malloc", s);
      if (p != nullptr) note_broken("a failed allocation returned a pointer");
      return false;
    }
    if (p == nullptr) {
      note_broken("an allocation succeeded with a null pointer");
      return false;
    }
    Block b{static_cast<std::uint64_t*>(p), bytes, ++sequence_ * 0x100000001b3ULL, stream, ordered};
    const auto begin = reinterpret_cast<std::uintptr_t>(p);
    for (const Block& other : live_) {
      const auto o = reinterpret_cast<std::uintptr_t>(other.words);
      if (begin < o + other.bytes && o < begin + bytes) note_corrupt("two live blocks share bytes");
    }
    std::size_t count = bytes / sizeof(std::uint64_t);
    void* params[] = {&b.words, &count, &b.tag};
    launch(kernels.fill, stream, params);
    live_.push_back(b);
    return true;
  }

  // Checks the block on its stream, then frees it on `free_stream` (ordered)
  // or cudaFree-style; a block whose free fails is still the application's.
  void release(std::size_t index, CUstream free_stream) {
    Block b = live_[index];
    live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(index));
    std::size_t count = b.bytes / sizeof(std::uint64_t);
    void* params[] = {&b.words, &count, &b.tag};
    launch(kernels.check, b.stream, params);
    // A stream-ordered free on another stream than the one that wrote the
    // block must be ordered after that work by the application.
    if (b.ordered && free_stream != b.stream) {
      drain();
    }
    const tidepool_status s = b.ordered ? tidepool_free_async(b.words, free_stream) : tidepool_free(b.words);
    if (s != TIDEPOOL_OK) {
      failed(b.ordered ? "tidepool_free_async" : "tidepool_free", s);
      unfreed_.push_back(b);
      live_.push_back(b);
    }
  }

  // Each live block once; one whose free fails stays live (at the back).
  void release_all() {
    for (std::size_t n = live_.size(); n > 0; --n) release(0, live_.front().stream);
  }

  void retry_frees() {
    std::vector<Block> again;
    again.swap(unfreed_);
    for (const Block& b : again) {
      auto it = std::find_if(live_.begin(), live_.end(), [&](const Block& l) { return l.words == b.words; });
      if (it != live_.end()) release(static_cast<std::size_t>(it - live_.begin()), b.stream);
    }
  }

  // Under a budget: with eviction, below what is live, so pages of live
  // blocks move to the host and back; without, just above it, so the pool
  // must reuse and trim to stay inside.
  void budget_round() {
    tidepool_stats s{};
    if (tidepool_get_stats(0, &s) != TIDEPOOL_OK) {
      failed("tidepool_get_stats", TIDEPOOL_ERROR_DRIVER);
      return;
    }
    if (evict_) {
      // Large blocks, so whole pages belong to one block and can move.
      for (int i = 0; i < 3; ++i) allocate(6 * kMiB, streams_[i % 3], i != 1);
      if (tidepool_get_stats(0, &s) != TIDEPOOL_OK) return;
      // The lowest budget from half of what is held upwards that the pool
      // can reach now: lowering to it evicts (a lowering it cannot reach is
      // refused, moving nothing). Then room for the allocations below, which
      // may evict more.
      const auto held = static_cast<std::size_t>(s.reserved_bytes);
      for (std::size_t target = std::max<std::size_t>(8 * kMiB, (held / 2) & ~(2 * kMiB - 1)); target < held;
           target += 2 * kMiB) {
        if (set_limit(target)) {
          evicted_ = evicted_ || sim.host_bytes() > 0;
          set_limit(target + 12 * kMiB);
          break;
        }
      }
      for (int i = 0; i < 3; ++i) allocate(4 * kMiB, streams_[(i + 1) % 3], i != 0);
      evicted_ = evicted_ || sim.host_bytes() > 0;
      check_all("under the budget, pages evicted");
      // Bring the oldest large block back, ahead of use.
      for (const Block& b : live_) {
        if (b.bytes >= 4 * kMiB) {
          const tidepool_status p = tidepool_prefetch(b.words, b.bytes, b.stream);
          // Out of memory is what the API promises when the budget has no room.
          if (p != TIDEPOOL_OK && p != TIDEPOOL_ERROR_OUT_OF_MEMORY) failed("tidepool_prefetch", p);
          const tidepool_status a = tidepool_advise(b.words, b.bytes, TIDEPOOL_ADVICE_WILL_NEED);
          if (a != TIDEPOOL_OK && a != TIDEPOOL_ERROR_OUT_OF_MEMORY) failed("tidepool_advise", a);
          break;
        }
      }
      evicted_ = evicted_ || sim.copied(1) > 0;
      check_all("after a prefetch");
      // Free two blocks, and take a little more under the same budget.
      for (int i = 0; i < 2 && !live_.empty(); ++i) release(0, live_.front().stream);
      for (int i = 0; i < 2; ++i) allocate(3 * kMiB, streams_[i % 3], i == 0);
      check_all("after frees under the budget");
    } else {
      set_limit(static_cast<std::size_t>(s.reserved_bytes) + 12 * kMiB);
      for (int i = 0; i < 4 && !live_.empty(); ++i) release(0, live_.front().stream);
      for (int i = 0; i < 4; ++i) allocate(pick_size(i + 60) / 2, streams_[i % 3], i % 2 == 1);
      check_all("under the budget");
    }
  }

  // A lowered budget is refused (out of memory, the old one kept) when what
  // is live cannot leave the device, as when a failed call stops a move.
  // True when the budget holds.
  bool set_limit(std::size_t bytes) {
    const tidepool_status s = tidepool_set_device_limit(0, bytes);
    if (s != TIDEPOOL_OK && !(bytes != 0 && s == TIDEPOOL_ERROR_OUT_OF_MEMORY)) failed("tidepool_set_device_limit", s);
    return s == TIDEPOOL_OK;
  }

  void trim() {
    std::size_t released = 0;
    if (tidepool_status s = tidepool_trim(0, &released); s != TIDEPOOL_OK) failed("tidepool_trim", s);
  }

  // Waits until every stream's queued work has run; the legacy stream waits
  // for every blocking stream.
  void drain() {
    std::vector<std::atomic<int>*> flags;
    CUstream all[] = {streams_[0], streams_[1], streams_[2], nullptr};
    for (CUstream stream : all) {
      auto* flag = new std::atomic<int>(0);
      void* params[] = {&flag};
      if (launch(kernels.signal, stream, params)) {
        flags.push_back(flag);
      } else {
        delete flag;
      }
    }
    for (std::atomic<int>* flag : flags) {
      while (flag->load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
      delete flag;
    }
  }

  // Every live block from the host, after its stream's work.
  void check_all(const char* when) {
    drain();
    for (const Block& b : live_) {
      if (!tidepool::testing::holds_pattern(b.words, b.bytes / sizeof(std::uint64_t), b.tag))
        note_corrupt(std::string("a live block's bytes changed (") + when + ")");
    }
    if (outcome.kernel_mismatches.load() != 0)
      note_corrupt(std::string("a block's check kernel failed (") + when + ")");
  }

  void failed(const char* api, tidepool_status s) {
    note_error(api, s);
    last_error_ = std::string(api) + ":" + tidepool_status_string(s);
  }

  const bool evict_;
  CUstream streams_[3] = {};
  std::vector<Block> live_;
  std::vector<Block> unfreed_;
  std::mt19937_64 rng_{20240611};
  std::uint64_t sequence_ = 0;
  bool evicted_ = false;
  std::string last_error_;
};

// The exported names of every entry point in tidepool's driver table.
std::vector<std::string> entry_point_names() {
  std::vector<std::string> names;
#define TIDEPOOL_FAULT_NAME(field, name, symbol, version) names.emplace_back(#symbol);
  TIDEPOOL_DRIVER_ENTRY_POINTS(TIDEPOOL_FAULT_NAME)
#undef TIDEPOOL_FAULT_NAME
  // The CUDA 13 forms the sim counts apart.
  names.emplace_back("cuCtxGetDevice_v2");
  names.emplace_back("cuCtxSynchronize_v2");
  return names;
}

std::string one_word(std::string text) {
  for (char& c : text) {
    if (c == ' ' || c == '\t' || c == '\n') c = '_';
  }
  return text.empty() ? "-" : text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4) {
    std::fprintf(stderr, "usage: %s pool|evict [NAME N]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  if (mode != "pool" && mode != "evict") {
    std::fprintf(stderr, "fault_workload: unknown mode %s\n", mode.c_str());
    return 2;
  }
  const bool evict = mode == "evict";
  // Before the runtime reads its environment, which the first hooked dlsym does.
  ::setenv("TIDEPOOL_CUDA_LIB", TIDEPOOL_SIM_LIBRARY, 1);
  ::setenv("TIDEPOOL_CONF", evict ? "evict:on,prefetch:launch,host_cache:256MiB,log:off" : "log:off", 1);

  sim.handle = ::dlopen(TIDEPOOL_SIM_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (sim.handle == nullptr) {
    std::fprintf(stderr, "fault_workload: cannot open the sim: %s\n", ::dlerror());
    return 2;
  }
  // The control API first: no driver call has been made yet.
  if (!bind("tidepool_sim_inject_fault", &sim.inject) || !bind("tidepool_sim_call_count", &sim.count) ||
      !bind("tidepool_sim_register_kernel", &sim.register_kernel) ||
      !bind("tidepool_sim_device_bytes_in_use", &sim.device_bytes) ||
      !bind("tidepool_sim_host_bytes_in_use", &sim.host_bytes) || !bind("tidepool_sim_copied_bytes", &sim.copied)) {
    return 2;
  }
  if (argc == 4) {
    fault.name = argv[2];
    fault.nth = static_cast<unsigned>(std::strtoul(argv[3], nullptr, 10));
    fault.result = realistic_error(fault.name);
    if (fault.nth == 0) return 2;
    sim.inject(fault.name.c_str(), fault.nth, fault.result);
  }
  // Through dlsym, so tidepool's hooks stand in front where it has them.
  if (!bind("cuInit", &sim.init) || !bind("cuDeviceGet", &sim.device_get) ||
      !bind("cuDevicePrimaryCtxRetain", &sim.ctx_retain) || !bind("cuCtxSetCurrent", &sim.ctx_set) ||
      !bind("cuStreamCreate", &sim.stream_create) || !bind("cuStreamDestroy_v2", &sim.stream_destroy) ||
      !bind("cuLaunchKernel", &sim.launch) || !register_kernels()) {
    return 2;
  }

  Workload workload(evict);
  std::string leak;
  if (workload.setup()) {
    workload.run();
    const bool after_fault = fault.name.empty() || fault_reached();
    workload.fresh_round(after_fault);
    if (!after_fault) workload.fresh_round(true);
    workload.check_leak(&leak);
  } else {
    note_broken("the application's setup failed");
  }

  for (const std::string& name : entry_point_names()) {
    std::printf("COUNT %s %llu %llu\n", name.c_str(), static_cast<unsigned long long>(sim.count(name.c_str())),
                static_cast<unsigned long long>(own_calls[name]));
  }
  const char* result = "ok";
  int code = 0;
  std::string detail = "-";
  if (!outcome.corrupt.empty()) {
    result = "corrupt";
    code = 3;
    detail = outcome.corrupt;
  } else if (!outcome.broken.empty()) {
    result = "broken";
    code = 4;
    detail = outcome.broken;
  } else if (!leak.empty()) {
    result = "leak";
    code = 5;
    detail = leak;
  }
  std::printf("RESULT outcome=%s reached=%d errors=%u first_error=%s evicted=%d detail=%s\n", result,
              fault_reached() ? 1 : 0, outcome.errors, one_word(outcome.first_error).c_str(),
              workload.evicted() ? 1 : 0, one_word(detail).c_str());
  std::fflush(stdout);
  return code;
}
