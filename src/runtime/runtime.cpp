// Runtime: configuration once, the driver once, allocators per device lazily.
#include "runtime/runtime.hpp"

#include <pthread.h>
#include <semaphore.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <span>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif
#include <cstdlib>

#include "driver/driver.hpp"
#include "runtime/exit_summary.hpp"
#include "runtime/reload_marker.hpp"

extern "C" int __cxa_atexit(void (*function)(void*), void* argument, void* dso_handle);

namespace tidepool::runtime {

namespace {

// The process's Runtime, once created; null again after unload().
Runtime* process_runtime = nullptr;
std::atomic<bool> unloaded{false};

// Posted by an exit handler that belongs to the process rather than to this
// library (__cxa_atexit with the handle of no library), so it runs only when
// the process exits, never at dlclose, and runs before any library's destructors. It is
// libc's sem_post, not code of ours, so it is safe to call after this
// library is gone. Leaked on purpose: one semaphore per load.
sem_t* exit_started = nullptr;

void finish_at_exit() {
  if (!unloaded.load()) Runtime::get().finish();
}

void watch_for_exit() {
  exit_started = new sem_t;
#ifdef __SANITIZE_ADDRESS__
  __lsan_ignore_object(exit_started);  // leaked on purpose; only libc's exit list refers to it
#endif
  ::sem_init(exit_started, 0, 0);
  // Through void (*)(void): the one function type GCC lets stand for any
  // other. The DSO handle is one no library has, so no dlclose ever runs it
  // (a null handle would do the same, but TSan's interceptor then calls the
  // handler without its argument).
  ::__cxa_atexit(reinterpret_cast<void (*)(void*)>(reinterpret_cast<void (*)()>(&::sem_post)), exit_started,
                 exit_started);
}

bool process_exiting() {
  int posted = 0;
  return exit_started != nullptr && ::sem_getvalue(exit_started, &posted) == 0 && posted > 0;
}

// Runs at dlclose of this library, and at exit; see Runtime::unload().
__attribute__((destructor)) void unload_at_library_end() { Runtime::unload(); }

std::atomic<bool> forked_child_logged{false};

std::atomic<InterpositionProbe> interposition_probe{nullptr};

}  // namespace

void set_interposition_probe(InterpositionProbe probe) noexcept { interposition_probe.store(probe); }

std::atomic<InterpositionProbe> capture_probe{nullptr};
void set_capture_probe(InterpositionProbe probe) noexcept { capture_probe.store(probe); }

std::atomic<bool> Runtime::forked_child_{false};

bool Runtime::forked_passthrough() noexcept {
  if (!forked_child_logged.exchange(true)) {
    // A raw write: the logger's lock may be held by a thread the fork left behind.
    static constexpr char kLine[] =
        "tidepool [warning] in a forked child: the pool stays with the parent; every CUDA call passes through "
        "to the driver\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, kLine, sizeof(kLine) - 1);
  }
  return true;
}

std::atomic<Runtime*> Runtime::instance_{nullptr};

Runtime& Runtime::create() {
  // Not destroyed at exit: see the lifetime note in runtime.hpp.
  static Runtime* const runtime = [] {
    watch_for_exit();
    auto* created = new Runtime(config_from_environment());
    // The report keeps the string as the user gave it, beside the values in effect.
    if (const char* conf = ::secure_getenv("TIDEPOOL_CONF")) created->run_.conf = conf;
    process_runtime = created;
    std::atexit(&finish_at_exit);
    ::pthread_atfork(nullptr, nullptr, [] { forked_child_.store(true, std::memory_order_relaxed); });
    return created;
  }();
  instance_.store(runtime, std::memory_order_release);
  return *runtime;
}

void Runtime::unload() noexcept {
  // At exit the Runtime stays: the host's last frees may still come, and the
  // driver may already be finalised. At dlclose nothing of ours can be
  // called again, so everything is given back.
  if (process_runtime == nullptr || process_exiting()) return;
  unloaded.store(true);
  Runtime* runtime = process_runtime;
  process_runtime = nullptr;
  runtime->finish();
  if (runtime->trace_ && runtime->owner_pid_ == ::getpid()) {
    leave_reload_marker(
        {runtime->config_.trace,
         std::chrono::duration_cast<std::chrono::nanoseconds>(runtime->trace_->start().time_since_epoch()).count()});
  }
  delete runtime;
  shutdown_logging();
}

std::unique_ptr<Runtime> Runtime::create(const Config& config) { return std::unique_ptr<Runtime>(new Runtime(config)); }

Runtime::Runtime(const Config& config)
    : config_(config), run_(run_started(config, std::nullopt)), owner_pid_(::getpid()) {
  configure_logging(config_);
  if (config_.passthrough) {
    // The parser's one-line error has been written to stderr by the parser's caller.
    passthrough_ = true;
    return;
  }
  const std::string path = config_.cuda_lib.empty() ? driver::default_driver_path() : config_.cuda_lib;
  run_.cuda_lib = path;
  auto opened = driver::Driver::open(path);
  if (!opened) {
    log_error("cannot open the CUDA driver '{}': {}; passing all calls through", path, opened.status().message());
    passthrough_ = true;
    return;
  }
  driver_ = std::move(opened.value());
  streams_ = std::make_unique<order::StreamRegistry>(driver_->api());
  ipc_ = std::make_unique<IpcSharing>(*driver_, [this](std::uintptr_t address) { return segment_owner_of(address); });
  call_sites_ = std::make_unique<CallSites>();
  if (InterpositionProbe probe = interposition_probe.load(); probe != nullptr && probe()) {
    interposed_ = true;
    streams_->set_complete(true);
    // The same hooks see every launch, copy, set and graph launch.
    streams_->follow_submissions();
  } else {
    log_info("stream creation is not interposed: cudaFree-style frees are reused after a context synchronisation");
  }
  if (InterpositionProbe probe = capture_probe.load(); probe != nullptr && probe()) captures_watched_ = true;
  if (!config_.trace.empty()) {
    // A plugin reloaded in this process goes on with the trace of its earlier load.
    std::optional<std::chrono::steady_clock::time_point> continue_from;
    if (auto earlier = take_reload_marker(); earlier && earlier->path == config_.trace) {
      continue_from = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(earlier->start_ns));
    }
    auto recorder = TraceRecorder::open(config_.trace, continue_from, call_sites_.get());
    if (recorder) {
      trace_ = std::move(recorder.value());
      log_info("recording allocation events to '{}'", config_.trace);
    } else {
      log_error("cannot open the trace file '{}': {}; running without a trace", config_.trace,
                recorder.status().message());
    }
  }
  // With eviction on, every launch, copy and set is scanned, so that the
  // pages it names stay where they are until it is queued (pool::Pins);
  // with prefetch:launch/learn the scan also brings their pages back.
  if (config_.evict) launch_scanner_ = std::make_unique<residency::LaunchScanner>(driver_->api());
  bring_back_at_launch_ = config_.prefetch == PrefetchMode::launch || config_.prefetch == PrefetchMode::learn;
  log_debug("tidepool {} on driver {} ({}), {}", "runtime", driver_->version(), path, describe(config_));
}

Runtime::~Runtime() {
  ipc_.reset();
  created_.store(0, std::memory_order_release);
  for (auto& slot : in_order_) slot.store(nullptr, std::memory_order_release);
  for (auto& slot : allocators_) delete slot.exchange(nullptr);
}

Allocator* Runtime::allocator_of_stream(CUstream stream) {
  if (driver_ == nullptr) return nullptr;
  const driver::Api& api = driver_->api();
  CUcontext context = nullptr;
  CUgreenCtx green = nullptr;
  if (api.streamGetCtx == nullptr || api.streamGetCtx(stream, &context, &green) != CUDA_SUCCESS || context == nullptr) {
    return nullptr;
  }
  CUdevice device = -1;
  {
    driver::ScopedContext scope(api, context);
    if (api.ctxGetDevice(&device) != CUDA_SUCCESS) return nullptr;
  }
  Allocator* owner = allocator(device);
  return owner != nullptr && owner->context() == context ? owner : nullptr;
}

void Runtime::stream_created(CUstream stream) {
  if (streams_ != nullptr) streams_->created(stream);
}

void Runtime::stream_destroying(CUstream stream) {
  if (streams_ == nullptr) return;
  const bool retired = streams_->destroying(stream);
  (void)find_allocator([&](Allocator* a) {
    a->pool().stream_destroyed(reinterpret_cast<std::uintptr_t>(stream), retired);
    return false;
  });
}

void Runtime::stream_destroy_failed(CUstream stream) {
  if (streams_ != nullptr) streams_->destroy_failed(stream);
}

void Runtime::overlapping_launch() {
  if (streams_ == nullptr || driver_ == nullptr) return;
  CUcontext context = nullptr;
  if (driver_->api().ctxGetCurrent(&context) != CUDA_SUCCESS || context == nullptr) return;
  streams_->overlapping_launch(context);
}

void Runtime::set_streams_complete(bool complete) noexcept {
  if (streams_ != nullptr) streams_->set_complete(complete);
}

util::Status Runtime::peer_access_changed(int accessor, int owner, bool enabled, PeerGrant why) {
  if (passthrough_ || accessor < 0 || accessor >= kMaxDevices || owner < 0 || owner >= kMaxDevices ||
      accessor == owner) {
    return util::Status::success();
  }
  std::lock_guard<std::mutex> guard(create_lock_);
  const auto o = static_cast<std::size_t>(owner);
  std::uint64_t& reason = why == PeerGrant::context ? context_peers_[o] : memory_pool_peers_[o];
  const std::uint64_t bit = std::uint64_t{1} << accessor;
  const bool before = ((context_peers_[o] | memory_pool_peers_[o]) & bit) != 0;
  const std::uint64_t kept = reason;
  reason = enabled ? reason | bit : reason & ~bit;
  const bool after = ((context_peers_[o] | memory_pool_peers_[o]) & bit) != 0;
  if (before == after) return util::Status::success();
  if (Allocator* pool = allocators_[o].load(std::memory_order_acquire)) {
    if (auto s = pool->set_peer_access(accessor, after); !s) {
      (void)pool->set_peer_access(accessor, before);  // back to what the driver will say again
      reason = kept;
      return s;
    }
  }
  peer_pairs_.fetch_add(after ? 1 : -1, std::memory_order_acq_rel);
  if (after && streams_ != nullptr) streams_->several_contexts();
  return util::Status::success();
}

util::Status Runtime::memory_pool_access_changed(CUmemoryPool pool, const CUmemAccessDesc* map, std::size_t count) {
  if (driver_ == nullptr || map == nullptr) return util::Status::success();
  const driver::Api& api = driver_->api();
  if (api.deviceGetDefaultMemPool == nullptr) return util::Status::success();
  int devices = 0;
  if (api.deviceGetCount(&devices) != CUDA_SUCCESS) return util::Status::success();
  int owner = -1;
  for (int d = 0; d < std::min(devices, kMaxDevices) && owner < 0; ++d) {
    CUmemoryPool own = nullptr;
    if (api.deviceGetDefaultMemPool(&own, d) == CUDA_SUCCESS && own == pool) owner = d;
  }
  if (owner < 0) return util::Status::success();  // a pool of the program's: its memory is the driver's
  for (std::size_t i = 0; i < count; ++i) {
    if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) continue;
    const bool enabled = map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE;
    if (auto s = peer_access_changed(map[i].location.id, owner, enabled, PeerGrant::memory_pool); !s) return s;
  }
  return util::Status::success();
}

void Runtime::foreign_created(CUmemGenericAllocationHandle handle, const CUmemAllocationProp& prop, std::size_t bytes,
                              std::uintptr_t caller) {
  if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE) return;  // host memory is not the device's budget
  const int device = prop.location.id;
  foreign_.created(handle, device, bytes, call_sites_ != nullptr ? call_sites_->tag(caller) : 0);
  if (device < 0 || device >= kMaxDevices) return;
  if (Allocator* a = allocators_[static_cast<std::size_t>(device)].load(std::memory_order_acquire)) {
    a->pool().outside_bytes_grew();
  }
}

void Runtime::driver_allocated(CUdeviceptr address, std::size_t bytes, std::uintptr_t caller) {
  if (driver_ == nullptr) return;
  int device = -1;
  if (driver_->api().pointerGetAttribute(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address) != CUDA_SUCCESS) return;
  foreign_.allocated(static_cast<std::uintptr_t>(address), device, bytes,
                     call_sites_ != nullptr ? call_sites_->tag(caller) : 0);
  if (device < 0 || device >= kMaxDevices) return;
  if (Allocator* a = allocators_[static_cast<std::size_t>(device)].load(std::memory_order_acquire)) {
    a->pool().outside_bytes_grew();
  }
}

void Runtime::memory_pools_changed() {
  if (driver_ == nullptr) return;
  const driver::Api& api = driver_->api();
  if (api.deviceGetMemPool == nullptr || api.deviceGetDefaultMemPool == nullptr) return;
  std::lock_guard<std::mutex> guard(pools_lock_);
  int count = 0;
  if (api.deviceGetCount(&count) != CUDA_SUCCESS) return;
  int replaced = 0;
  for (int d = 0; d < std::min(count, kMaxDevices); ++d) {
    CUmemoryPool current = nullptr;
    CUmemoryPool own = nullptr;
    const bool program = api.deviceGetMemPool(&current, d) == CUDA_SUCCESS &&
                         api.deviceGetDefaultMemPool(&own, d) == CUDA_SUCCESS && current != own;
    if (program != program_pool_[static_cast<std::size_t>(d)].load(std::memory_order_relaxed)) {
      log_info("device {}: stream-ordered allocations {}", d,
               program ? "go to the memory pool the program set" : "are tidepool's again (default memory pool)");
    }
    program_pool_[static_cast<std::size_t>(d)].store(program, std::memory_order_relaxed);
    replaced += program ? 1 : 0;
  }
  program_pools_.store(replaced, std::memory_order_release);
}

bool Runtime::program_pool_for(int device, CUstream stream) {
  // cuMemAllocAsync takes from the current pool of the stream's device.
  if (driver_ != nullptr && stream != nullptr && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD) {
    const driver::Api& api = driver_->api();
    CUcontext context = nullptr;
    CUgreenCtx green = nullptr;
    if (api.streamGetCtx != nullptr && api.streamGetCtx(stream, &context, &green) == CUDA_SUCCESS &&
        context != nullptr) {
      driver::ScopedContext scope(api, context);
      CUdevice owner = -1;
      if (api.ctxGetDevice(&owner) == CUDA_SUCCESS) device = owner;
    }
  }
  return device >= 0 && device < kMaxDevices && program_pool_[static_cast<std::size_t>(device)].load();
}

util::Status Runtime::peer_access_changed(CUcontext peer, bool enabled) {
  if (driver_ == nullptr) return util::Status::success();
  const driver::Api& api = driver_->api();
  CUdevice accessor = -1;
  CUdevice owner = -1;
  if (auto s = driver::check(api.ctxGetDevice(&accessor), "cuCtxGetDevice"); !s) return s;
  {
    driver::ScopedContext scope(api, peer);
    if (auto s = driver::check(api.ctxGetDevice(&owner), "cuCtxGetDevice"); !s) return s;
  }
  return peer_access_changed(accessor, owner, enabled, PeerGrant::context);
}

Allocator* Runtime::create_allocator(int device) {
  if (device < 0 || device >= kMaxDevices || passthrough_) return nullptr;
  Allocator* existing = allocators_[device].load(std::memory_order_acquire);
  if (existing != nullptr) return existing;
  if (failed_[device].load(std::memory_order_relaxed)) return nullptr;

  std::lock_guard<std::mutex> guard(create_lock_);
  existing = allocators_[device].load(std::memory_order_acquire);
  if (existing != nullptr) return existing;

  // A percentage needs the device's size: create first, then apply the limit.
  AllocatorOptions options = allocator_options(config_, device);
  options.trace = trace_.get();
  options.call_sites = call_sites_.get();
  options.streams = streams_.get();
  options.passthrough_allocations = &passthrough_allocations_[device];
  options.peers =
      context_peers_[static_cast<std::size_t>(device)] | memory_pool_peers_[static_cast<std::size_t>(device)];
  options.outside_bytes = foreign_.bytes_now(device);
  if (options.residency.compress != residency::CompressMode::off && !interposed_) {
    // A compressed page cannot be read where it lies: only the preload's
    // hooks see every launch, copy and set that might read it.
    log_warn(
        "device {}: compress needs the preload (launches tidepool does not see could read compressed pages): "
        "evicted pages go raw",
        device);
    options.residency.compress = residency::CompressMode::off;
  }
  // A budget that cannot work on this device is refused before anything is reserved.
  if (config_.device_limit) {
    const driver::Api& api = driver_->api();
    CUdevice handle = 0;
    std::size_t total = 0;
    if (api.init(0) == CUDA_SUCCESS && api.deviceGet(&handle, device) == CUDA_SUCCESS &&
        api.deviceTotalMem(&total, handle) == CUDA_SUCCESS) {
      if (const std::string refused = check_device_limit(config_, device, total); !refused.empty()) {
        log_error("{}", refused);
        failed_[device].store(true, std::memory_order_relaxed);
        return nullptr;
      }
    }
  }
  auto created = Allocator::create(*driver_, options);
  if (!created) {
    // A device without what the pool needs stays passed through; a driver
    // call that failed (cuInit, cuDeviceGet, a context) is tried again by
    // the next allocation, a few times, before the device is given up.
    const util::Error error = created.status().error();
    const bool lasting = error == util::Error::not_supported || error == util::Error::bad_config ||
                         create_attempts_[device].fetch_add(1, std::memory_order_relaxed) + 1 >= kCreateAttempts;
    log_error(
        "device {}: cannot create the pool: {}; {}", device, created.status().message(),
        lasting ? "passing its allocations through" : "passing this allocation through, trying again at the next");
    if (lasting) failed_[device].store(true, std::memory_order_relaxed);
    return nullptr;
  }
  Allocator* allocator = created.value().release();
  if (config_.device_limit && config_.device_limit->is_percent) {
    // Checked against the device above, and nothing is live yet: it holds.
    (void)allocator->set_device_limit(
        static_cast<std::size_t>(config_.device_limit->resolve(allocator->device_total_bytes())));
  }
  if (!allocator->space().uses_vmm()) {
    log_warn("device {}: no virtual memory management; pooling cuMemAlloc segments, eviction off", device);
  } else if (config_.evict && allocator->residency() == nullptr) {
    log_warn("device {}: eviction is off: {}", device, allocator->eviction_off_reason());
  }
  log_info("device {}: pool ready, policy {}, budget {} bytes, page {} bytes", device, allocator->pool().policy_name(),
           allocator->space().device_limit(), allocator->space().page_size());
  // Under create_lock_: one writer, so the count only grows past a slot
  // already filled. The list first: a pointer from the allocator, once
  // allocators_ hands it out, must be found by owner_of at its free.
  const int index = created_.load(std::memory_order_relaxed);
  in_order_[static_cast<std::size_t>(index)].store(allocator, std::memory_order_release);
  created_.store(index + 1, std::memory_order_release);
  allocators_[device].store(allocator, std::memory_order_release);
  if (streams_ != nullptr) {
    // The pool's context is one the program's work may be queued in; one
    // other than the program's first (a context it created) makes two.
    streams_->made_current(allocator->context());
    if (index > 0) streams_->several_contexts();
  }
  return allocator;
}

void Runtime::before_launch_one_pool(Allocator* a, CUfunction function, void** params, void** extra, CUstream stream,
                                     Submission* s) {
  // Not a structured binding: the lambda below captures `begin`, which
  // clang before 16 refuses for a binding.
  const std::pair<std::uintptr_t, std::uintptr_t> span = a->launch_span();
  const std::uintptr_t begin = span.first;
  const std::uintptr_t end = span.second;
  if (begin >= end) return;
  auto counts = launch_counts_.mine();
  counts.add(kLaunchesScanned);
  // One pool, no peer access, one context: every launch that names a block
  // is this pool's context's (see launching_place).
  using OnHost = pool::Pool::OnHost;
  const OnHost on_host = bring_back_at_launch_ ? OnHost::bring_back_later : OnHost::read_there;
  std::array<pool::SubmittedWord, 32> words;  // trivial: only the gathered are set
  std::size_t gathered = 0;
  LaunchUse use;
  bool named = false;
  const auto ask_pool = [&] {
    s->note(a);  // first: a pin taken before a throw is still released
    named = a->use_in_launch(std::span<pool::SubmittedWord>(words.data(), gathered), stream, &use, &s->pins, on_host) ||
            named;
    gathered = 0;
  };
  const std::uintptr_t length = end - begin;
  const bool read = launch_scanner_->for_each_word(function, params, extra, [&](std::uintptr_t word) {
    if (word - begin >= length) return;
    if (gathered == words.size()) ask_pool();
    words[gathered++].address = word;
  });
  if (gathered > 0) ask_pool();
  if (!read) {
    counts.add(kLaunchesUnread);
    a->unread_launch();
  }
  if (!named) return;
  counts.add(kLaunchesNamingBlocks);
  a->end_launch(function, use, stream);  // with prefetch:off, counts a launch reading host pages
}

void Runtime::before_launch(CUfunction function, void** params, void** extra, CUstream stream, Submission* s) {
  if (launch_scanner_ == nullptr) return;
  if (created_.load(std::memory_order_acquire) == 1 && peer_pairs_.load(std::memory_order_acquire) == 0 &&
      (streams_ == nullptr || streams_->one_context())) {
    if (Allocator* only = in_order_[0].load(std::memory_order_acquire)) {
      before_launch_one_pool(only, function, params, extra, stream, s);
      return;
    }
  }
  before_launch_pools(function, params, extra, stream, s);
}

void Runtime::before_launch_pools(CUfunction function, void** params, void** extra, CUstream stream, Submission* s) {
  // The schedule (prefetch:learn) follows the device of the first pool
  // asked that owns a word (pools are asked in the order their spans first
  // held one: where spans overlap, not always the first pointer's);
  // pointers into other devices' pools are still marked used and brought
  // back.
  // Each pool's span, read once per launch: a word outside them all (most
  // words) costs a few compares and no call. The words inside a span are
  // gathered and its pool asked once for them all, under one hold of its
  // lock; pools in the order of their first word. Trivial, so that a launch
  // pays only for what it fills.
  struct Span {
    Allocator* allocator;
    std::uintptr_t begin;
    std::uintptr_t end;
    std::size_t gathered;
    std::array<pool::SubmittedWord, 32> words;
  };
  constexpr std::size_t kSpans = 8;  // devices scanned this way; beyond, every allocator is asked word by word
  std::array<Span, kSpans> spans;
  std::size_t count = 0;
  bool more = false;
  (void)find_allocator([&](Allocator* a) {
    const auto [begin, end] = a->launch_span();
    if (begin >= end) return false;
    if (count == kSpans) {
      more = true;
      return true;
    }
    Span& span = spans[count++];
    span.allocator = a;
    span.begin = begin;
    span.end = end;
    span.gathered = 0;
    return false;
  });
  if (count == 0) return;
  auto counts = launch_counts_.mine();
  counts.add(kLaunchesScanned);
  Allocator* owner = nullptr;
  LaunchUse use;
  LaunchUse elsewhere;
  using OnHost = pool::Pool::OnHost;
  LaunchingDevice launching(*this, stream, /*kernels=*/true);
  const auto offer = [&](Allocator* a, std::span<pool::SubmittedWord> words) {
    // Another pool's blocks come back at once: only the owner's end_launch
    // runs. Those of a pool of another device than the launch's are held
    // there for good (OnHost::bring_back_for_peer).
    const bool first = owner == nullptr || a == owner;
    const OnHost on_host = launching.other_than(a)  ? OnHost::bring_back_for_peer
                           : !bring_back_at_launch_ ? OnHost::read_there
                           : first                  ? OnHost::bring_back_later
                                                    : OnHost::bring_back_now;
    s->note(a);  // first: a pin taken before a throw is still released
    if (a->use_in_launch(words, stream, first ? &use : &elsewhere, &s->pins, on_host)) {
      if (owner == nullptr) owner = a;
      return true;
    }
    return false;
  };
  std::array<std::size_t, kSpans> order;  // spans holding gathered words, by their first
  std::size_t ordered = 0;
  const auto ask_pools = [&] {
    for (std::size_t i = 0; i < ordered; ++i) {
      Span& span = spans[order[i]];
      (void)offer(span.allocator, std::span<pool::SubmittedWord>(span.words.data(), span.gathered));
      span.gathered = 0;
    }
    ordered = 0;
  };
  const auto gather = [&](std::size_t i, std::uintptr_t word) {
    Span& span = spans[i];
    if (span.gathered == span.words.size()) ask_pools();
    if (span.gathered == 0) order[ordered++] = i;
    span.words[span.gathered++].address = word;
  };
  bool read = true;
  if (count == 1 && !more) {
    // One pool (one device): its span in registers.
    const std::uintptr_t begin = spans[0].begin;
    const std::uintptr_t length = spans[0].end - begin;
    read = launch_scanner_->for_each_word(function, params, extra, [&](std::uintptr_t word) {
      if (word - begin < length) gather(0, word);
    });
  } else {
    // Spans overlap (each device's pool reserves its segments wherever the
    // process's VA has room, between the others'): a word goes to every
    // pool whose span holds it, and only its owner finds it, pins it and
    // keeps it from moving under the kernel. Pools past the scanned ones are
    // asked word by word.
    read = launch_scanner_->for_each_word(function, params, extra, [&](std::uintptr_t word) {
      for (std::size_t i = 0; i < count; ++i) {
        if (word - spans[i].begin < spans[i].end - spans[i].begin) gather(i, word);
      }
      if (!more) return;
      (void)find_allocator([&](Allocator* a) {
        const bool scanned = std::any_of(spans.begin(), spans.begin() + static_cast<std::ptrdiff_t>(count),
                                         [&](const Span& span) { return span.allocator == a; });
        if (scanned || !a->pool().may_own(word)) return false;
        pool::SubmittedWord one{};
        one.address = word;
        return offer(a, std::span<pool::SubmittedWord>(&one, 1));
      });
    });
  }
  ask_pools();
  if (!read) {
    counts.add(kLaunchesUnread);
    (void)find_allocator([&](Allocator* a) {
      a->unread_launch();
      return false;
    });
  }
  if (s->pins.overflow) {
    // The pins are shared by every pool the launch named.
    (void)find_allocator([&](Allocator* a) {
      a->pins_overflowed();
      return false;
    });
  }
  if (owner == nullptr) return;
  counts.add(kLaunchesNamingBlocks);
  owner->end_launch(function, use, stream);
}

void Runtime::scan_failed() noexcept {
  try {
    (void)find_allocator([&](Allocator* a) {
      a->unread_launch();
      return false;
    });
  } catch (...) {
    // Nothing more can be done for this submission; it goes to the driver as it is.
  }
}

void Runtime::before_copy(std::uintptr_t first, std::uintptr_t second, CUstream stream, Submission* s) {
  if (launch_scanner_ == nullptr) return;
  LaunchingDevice launching(*this, stream, /*kernels=*/false);
  for (const std::uintptr_t address : {first, second}) {
    if (address == 0) continue;
    (void)find_allocator([&](Allocator* a) {
      if (!a->pool().may_own(address)) return false;
      using OnHost = pool::Pool::OnHost;
      const OnHost on_host = launching.other_than(a) ? OnHost::bring_back_for_peer
                             : bring_back_at_launch_ ? OnHost::bring_back_now
                                                     : OnHost::read_there;
      s->note(a);  // first: a pin taken before a throw is still released
      return a->use_in_copy(address, stream, &s->pins, on_host);
    });
  }
  // A batch (several calls for one submission) can name more blocks than
  // there are pins; reported once, on the call that overflowed.
  if (s->pins.overflow && !s->overflow_reported) {
    s->overflow_reported = true;
    (void)find_allocator([&](Allocator* a) {
      a->pins_overflowed();
      return false;
    });
  }
}

void Runtime::hold_for_graph(CUgraphExec exec, const GraphUse& use) {
  std::vector<GraphHolds::Held> held;
  // Every hold made here is undone if anything below throws.
  struct Undo {
    explicit Undo(std::vector<GraphHolds::Held>* h) : held(h) {}
    Undo(const Undo&) = delete;
    Undo& operator=(const Undo&) = delete;
    std::vector<GraphHolds::Held>* held;
    bool done = false;
    ~Undo() {
      if (done) return;
      for (const GraphHolds::Held& h : *held) h.owner->pool().release_graph_holds(&h.block, 1);
    }
  } undo{&held};
  const auto hold = [&](std::uintptr_t word) {
    (void)find_allocator([&](Allocator* a) {
      if (!a->pool().may_own(word)) return false;
      held.reserve(held.size() + 1);  // so that the push below cannot throw with the hold made
      GraphHolds::Held h{a, {}};
      if (!a->pool().hold_for_graph(word, 0, &h.block)) return false;
      // One hold per block: a graph launch then visits each block once.
      const bool again = std::any_of(held.begin(), held.end(), [&](const GraphHolds::Held& o) {
        return o.owner == a && o.block.buffer_id == h.block.buffer_id;
      });
      if (again) {
        a->pool().release_graph_holds(&h.block, 1);
      } else {
        held.push_back(h);
      }
      return true;
    });
  };
  bool read = !use.unread;
  for (const KernelNode& k : use.kernels) {
    read = launch_scanner_->for_each_word(k.function, k.params, k.extra, hold) && read;
  }
  if (!read) {
    // Its replays may use any block.
    (void)find_allocator([&](Allocator* a) {
      a->unread_launch();
      return false;
    });
  }
  for (const std::uintptr_t address : use.addresses) {
    if (address != 0) hold(address);
  }
  if (held.empty()) return;
  graph_holds_.add(exec, held);
  undo.done = true;
}

std::pair<std::uintptr_t, std::uintptr_t> Runtime::copy_addresses(const CUDA_MEMCPY3D& c) noexcept {
  // A side's first byte: its origin's offset in rows of `pitch` bytes and
  // slices of `height` rows. Host memory and arrays hold no pool block.
  const auto side = [](CUmemorytype type, CUdeviceptr base, std::size_t x, std::size_t y, std::size_t z,
                       std::size_t pitch, std::size_t height) -> std::uintptr_t {
    if ((type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) || base == 0) return 0;
    return static_cast<std::uintptr_t>(base) + x + (y + z * height) * pitch;
  };
  return {side(c.srcMemoryType, c.srcDevice, c.srcXInBytes, c.srcY, c.srcZ, c.srcPitch, c.srcHeight),
          side(c.dstMemoryType, c.dstDevice, c.dstXInBytes, c.dstY, c.dstZ, c.dstPitch, c.dstHeight)};
}

void Runtime::read_graph(CUgraph graph, int depth, GraphUse* use) const {
  const driver::Api& api = driver_->api();
  if (api.graphGetNodes == nullptr || api.graphNodeGetType == nullptr) return;
  std::size_t count = 0;
  if (api.graphGetNodes(graph, nullptr, &count) != CUDA_SUCCESS || count == 0) return;
  std::vector<CUgraphNode> nodes(count);
  if (api.graphGetNodes(graph, nodes.data(), &count) != CUDA_SUCCESS) return;
  nodes.resize(std::min(count, nodes.size()));
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    if (api.graphNodeGetType(node, &type) != CUDA_SUCCESS) continue;
    // A node whose parameters cannot be read makes the graph's use unread.
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
      CUDA_KERNEL_NODE_PARAMS params{};
      // A node captured from a runtime launch may name a library kernel
      // (`kern`, used when `func` is null), which the scan reads as well.
      const bool got =
          api.graphKernelNodeGetParams != nullptr && api.graphKernelNodeGetParams(node, &params) == CUDA_SUCCESS;
      const CUfunction function = !got                     ? nullptr
                                  : params.func != nullptr ? params.func
                                                           : reinterpret_cast<CUfunction>(params.kern);
      if (function != nullptr) {
        use->kernels.push_back({function, params.kernelParams, params.extra});
      } else {
        use->unread = true;
      }
    } else if (type == CU_GRAPH_NODE_TYPE_MEMCPY) {
      CUDA_MEMCPY3D copy{};
      if (api.graphMemcpyNodeGetParams != nullptr && api.graphMemcpyNodeGetParams(node, &copy) == CUDA_SUCCESS) {
        const auto [source, destination] = copy_addresses(copy);
        use->addresses.push_back(source);
        use->addresses.push_back(destination);
      } else {
        use->unread = true;
      }
    } else if (type == CU_GRAPH_NODE_TYPE_MEMSET) {
      CUDA_MEMSET_NODE_PARAMS set{};
      if (api.graphMemsetNodeGetParams != nullptr && api.graphMemsetNodeGetParams(node, &set) == CUDA_SUCCESS) {
        use->addresses.push_back(set.dst);
      } else {
        use->unread = true;
      }
    } else if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
      CUgraph child = nullptr;
      if (api.graphChildGraphNodeGetGraph != nullptr && depth > 0 &&
          api.graphChildGraphNodeGetGraph(node, &child) == CUDA_SUCCESS && child != nullptr) {
        read_graph(child, depth - 1, use);
      } else {
        use->unread = true;
      }
    } else if (type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
      use->unread = true;  // its bodies are graphs the driver does not hand out here
    }
  }
}

void Runtime::graph_instantiated(CUgraphExec exec, CUgraph graph) {
  if (launch_scanner_ == nullptr || exec == nullptr) return;
  constexpr int kChildDepth = 16;  // graphs nest a few levels; the bound only stops a driver gone wrong
  GraphUse use;
  read_graph(graph, kChildDepth, &use);
  hold_for_graph(exec, use);
}

void Runtime::graph_kernel_set(CUgraphExec exec, CUfunction function, void** params, void** extra) {
  if (launch_scanner_ == nullptr || exec == nullptr || function == nullptr) return;
  hold_for_graph(exec, GraphUse{{{function, params, extra}}, {}});
}

void Runtime::graph_copy_set(CUgraphExec exec, std::uintptr_t first, std::uintptr_t second) {
  if (launch_scanner_ == nullptr || exec == nullptr) return;
  hold_for_graph(exec, GraphUse{{}, {first, second}});
}

void Runtime::before_graph_launch(CUgraphExec exec, CUstream stream, Submission* s) {
  if (launch_scanner_ == nullptr) return;
  LaunchingDevice launching(*this, stream, /*kernels=*/false);
  graph_holds_.for_each(exec, [&](const GraphHolds::Held& h) {
    using OnHost = pool::Pool::OnHost;
    const OnHost on_host = launching.other_than(h.owner) ? OnHost::bring_back_for_peer
                           : bring_back_at_launch_       ? OnHost::bring_back_now
                                                         : OnHost::read_there;
    s->note(h.owner);
    (void)h.owner->use_in_copy(h.block.address, stream, &s->pins, on_host);
  });
}

void Runtime::graph_destroying(CUgraphExec exec) {
  for (const GraphHolds::Held& h : graph_holds_.take(exec)) h.owner->pool().release_graph_holds(&h.block, 1);
}

Runtime::StreamPlace Runtime::launching_place(CUstream stream) {
  // One context all along (no second pool, no peer, no context the program
  // made or made current): every stream is the pools' own context's.
  if (streams_ != nullptr
          ? streams_->one_context()
          : created_.load(std::memory_order_acquire) < 2 && peer_pairs_.load(std::memory_order_acquire) == 0) {
    return {};
  }
  const driver::Api& api = driver_->api();
  CUcontext context = nullptr;
  CUgreenCtx green = nullptr;
  // The per-thread stream's context is the current one, as the legacy
  // stream's is.
  if (api.streamGetCtx == nullptr ||
      api.streamGetCtx(stream == CU_STREAM_PER_THREAD ? nullptr : stream, &context, &green) != CUDA_SUCCESS ||
      context == nullptr) {
    return {};
  }
  // A pool's own (primary) context names its device at no cost; another
  // context (one the program made, or a device without a pool) is asked.
  if (const Allocator* own = find_allocator([&](Allocator* a) { return a->context() == context; })) {
    return {context, own->device()};
  }
  driver::ScopedContext scope(api, context);
  CUdevice device = -1;
  return {context, api.ctxGetDevice(&device) == CUDA_SUCCESS ? device : -1};
}

void Runtime::after_submission(const Submission& s) {
  for (std::size_t i = 0; i < s.owners; ++i) s.owner[i]->release_pins(s.pins);
}

Allocator* Runtime::owner_of(std::uintptr_t address) {
  return find_allocator([&](Allocator* a) { return a->pool().owns(address); });
}

util::Status Runtime::deallocate(std::uintptr_t address, std::uintptr_t stream, bool ordered) {
  if (!ordered && streams_ != nullptr && !streams_->one_context()) {
    // Another context's work on the block (a peer's kernels, a copy on
    // another device's stream) is in no order with this pool's barriers or
    // fences: the free waits for it, as native cudaFree waits for every
    // device. Outside any pool's lock: a gate in that context may need one.
    if (const Allocator* owner = owner_of(address)) (void)streams_->wait_for_contexts_but(owner->context());
  }
  util::Status answer(util::Error::invalid_value, "pointer is not a live tidepool allocation");
  (void)find_allocator([&](Allocator* a) {
    if (!a->pool().may_own(address)) return false;
    answer = a->deallocate(address, stream, ordered);
    return answer.error() != util::Error::invalid_value;
  });
  return answer;
}

Allocator* Runtime::segment_owner_of(std::uintptr_t address) {
  return find_allocator([&](Allocator* a) { return a->pool().in_segments(address); });
}

void Runtime::note_passthrough_allocation(int device) noexcept {
  if (device >= 0 && device < kMaxDevices) {
    passthrough_allocations_[device].fetch_add(1, std::memory_order_relaxed);
  }
}

Report Runtime::report(std::optional<std::chrono::steady_clock::time_point> give_up_at) const {
  Report report;
  report.run = run_;
  run_ended(report.run);
  report.policy = config_.policy;
  report.passthrough = passthrough_;
  report.launches.scanned = launch_counts_.total(kLaunchesScanned);
  report.launches.naming_blocks = launch_counts_.total(kLaunchesNamingBlocks);
  report.launches.unread = launch_counts_.total(kLaunchesUnread);
  for (int device = 0; device < kMaxDevices; ++device) {
    const Allocator* a = allocators_[device].load(std::memory_order_acquire);
    const std::uint64_t passed = passthrough_allocations_[device].load(std::memory_order_relaxed);
    ForeignMemory::DeviceFigures foreign = foreign_.figures(device);
    if (a == nullptr && passed == 0 && foreign.peak_bytes == 0) continue;
    DeviceReport d;
    d.device = device;
    d.passthrough_allocations = passed;
    d.foreign = std::move(foreign);
    if (a != nullptr) {
      if (give_up_at) {
        d.complete = a->pool().try_stats(*give_up_at, &d.pool, &d.size_classes, &d.owners);
      } else {
        d.pool = a->pool().stats();
        d.size_classes = a->pool().size_classes();
        d.owners = a->pool().owner_bytes();
      }
      if (const residency::Residency* r = a->residency()) {
        d.eviction = true;
        if (!give_up_at) {
          d.residency = r->stats();
        } else if (d.complete) {
          d.complete = r->try_stats(*give_up_at, &d.residency);
        }
      }
      d.device_limit_bytes = a->space().device_limit();
      d.device_total_bytes = a->device_total_bytes();
      d.vmm = a->space().uses_vmm();
      d.page_bytes = a->space().page_size();
    }
    report.devices.push_back(d);
  }
  // Callers named now, off the hot path; only tags some pool counted.
  std::size_t tags = 0;
  for (const DeviceReport& d : report.devices) {
    tags = std::max(tags, d.owners.used());
    for (const ForeignMemory::ByTag& t : d.foreign.by_tag) tags = std::max<std::size_t>(tags, t.tag + 1u);
  }
  report.callers.resize(tags);
  for (std::size_t t = 1; t < tags && call_sites_; ++t) {
    report.callers[t] = CallSites::describe(call_sites_->caller(static_cast<std::uint16_t>(t)));
  }
  return report;
}

util::Status Runtime::write_report(const std::string& path) const {
  const std::string& target = path.empty() ? config_.report : path;
  if (target.empty()) return {util::Error::invalid_value, "no report path given or configured"};
  return runtime::write_report(report(), target);
}

void Runtime::finish() noexcept {
  if (finished_.exchange(true)) return;
  // A forked child exiting runs this too: the report and the trace are the
  // parent's to write.
  if (::getpid() != owner_pid_) {
    flush_logging();
    return;
  }
  // Later events (frees during static destruction) still write through.
  if (trace_) trace_->finish();
  // One report serves the file and the summary, so the two agree. At exit
  // a failure here (memory, a JSON error) must not end the host with
  // std::terminate: it is logged and the exit goes on.
  try {
    if (!config_.report.empty() || logger().should_log(spdlog::level::info)) {
      // A pool still busy after kExitWait is left out, never waited for: a
      // signal handler that calls exit() may have interrupted the thread
      // that holds its lock, which then never lets go.
      Report final_report = report(std::chrono::steady_clock::now() + kExitWait);
      final_report.run.at_exit = true;
      for (const DeviceReport& d : final_report.devices) {
        if (!d.complete) {
          log_warn(
              "device {}: the pool was still busy at exit (a thread interrupted inside a tidepool call?); "
              "its figures are left out of the report",
              d.device);
        }
      }
      SummaryOutputs outputs;
      outputs.report_path = config_.report;
      if (!config_.report.empty()) {
        const util::Status s = runtime::write_report(final_report, config_.report);
        if (!s) log_error("cannot write the report to '{}': {}", config_.report, s.message());
        outputs.report_written = s.ok();
      }
      if (trace_) outputs.trace_path = config_.trace;
      log_exit_summary(final_report, outputs);
    }
  } catch (const std::exception& e) {
    try {
      log_error("cannot write the report or the exit summary: {}", e.what());
    } catch (...) {
    }
  }
  flush_logging();
}

}  // namespace tidepool::runtime
