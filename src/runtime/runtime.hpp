// The runtime layer's one header, and Runtime: tidepool's process-wide state.
//
// Runtime is created on first use from any front (C API, preload hook,
// pluggable allocator), reads TIDEPOOL_CONF once, opens the driver, and then
// creates one Allocator per device lazily, on that device's first allocation.
// When the configuration is bad or the driver cannot be opened it runs in
// pass-through mode: fronts hand every call to the driver untouched.
//
// Lifetime: the Runtime is not destroyed at exit. Hooks can run during the
// host's static destruction and must still find it; the process's exit
// releases the memory. The exit report and the trace are finished by an
// atexit handler, in the process that created the Runtime only: a forked
// child that exits leaves both to its parent. When the library itself is
// unloaded (dlclose of a plugin that linked it), unload() destroys the
// Runtime, which gives every pool page back to the driver; a later load
// starts afresh.
//
// Fork: a forked child never touches the pool. Its locks may have been held
// by threads that do not exist in the child, its queued work ran on streams
// the child cannot wait on (a real driver is unusable after fork), and its
// memory is the parent's. passthrough() is true in the child, so every call
// goes to the driver untouched; the first one logs why, once.
//
// Tracing: with `trace:PATH` the Runtime opens one TraceRecorder, shared by
// every device's Allocator; finish() flushes it. A path that cannot be opened
// is one error line, and the run goes on untraced.
//
// Locks: `create_lock_` (a mutex) guards creating allocators; it is taken
// only on a device's first allocation and never while a pool lock is held.
//
// Exit: finish() writes the report (report:PATH, with the run's metadata
// from run_info.hpp) and, at log:info, the exit summary (exit_summary.hpp).
// It never waits forever: a pool still locked after kExitWait (a signal
// handler called exit() while the thread it interrupted held the lock) is
// left out of both, and the log says so.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "driver/driver.hpp"
#include "order/order.hpp"
#include "residency/residency.hpp"
#include "runtime/allocator.hpp"
#include "runtime/call_sites.hpp"
#include "runtime/config.hpp"
#include "runtime/foreign_memory.hpp"
#include "runtime/graph_holds.hpp"
#include "runtime/gzip_members.hpp"
#include "runtime/ipc_sharing.hpp"
#include "runtime/logging.hpp"
#include "runtime/memory_info.hpp"
#include "runtime/report.hpp"
#include "runtime/trace_format.hpp"
#include "runtime/trace_recorder.hpp"
#include "util/util.hpp"

namespace tidepool::runtime {

inline constexpr int kMaxDevices = 64;
// How long the exit report waits for a pool another frame holds.
inline constexpr std::chrono::milliseconds kExitWait{1000};

// A front that can tell whether every stream creation of the process reaches
// Runtime::stream_created() registers this probe (from a constructor, before
// any Runtime exists); each Runtime asks it once, when it is created.
using InterpositionProbe = bool (*)();
void set_interposition_probe(InterpositionProbe probe) noexcept;
// The capture hooks register theirs: whether every begin-capture entry point
// the process calls is a hook, and no capture could have begun before they
// were loaded (Runtime::capture_possible).
void set_capture_probe(InterpositionProbe probe) noexcept;

class Runtime {
 public:
  // The process's runtime, created on first call (thread-safe). Inline:
  // every hooked call asks, and once it exists a load and a test answer.
  static Runtime& get() {
    Runtime* existing = instance_.load(std::memory_order_acquire);
    return existing != nullptr ? *existing : create();
  }

  // For tests and tools: a runtime over an explicit configuration and driver
  // path, independent of the process-wide one.
  static std::unique_ptr<Runtime> create(const Config& config);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  [[nodiscard]] bool passthrough() const noexcept {
    if (forked_child_.load(std::memory_order_relaxed)) return forked_passthrough();
    return passthrough_;
  }
  // Destroys the process's runtime, when the library is being unloaded
  // rather than the process ending; see the lifetime note.
  static void unload() noexcept;
  [[nodiscard]] const Config& config() const noexcept { return config_; }
  // The driver tidepool opened; null when it could not be opened.
  [[nodiscard]] const driver::Driver* driver() const noexcept { return driver_.get(); }
  // The trace being recorded; null when none is configured or it could not be opened.
  [[nodiscard]] TraceRecorder* trace() const noexcept { return trace_.get(); }

  // The allocator of `device`, creating it on first use. Null in pass-through
  // mode, for a device out of range, or when creation failed (logged once).
  // Inline: every allocation asks, and once it exists a load and a test answer.
  Allocator* allocator(int device) {
    if (device >= 0 && device < kMaxDevices && !passthrough_) {
      if (Allocator* existing = allocators_[device].load(std::memory_order_acquire)) return existing;
    }
    return create_allocator(device);
  }
  // The allocator of the device whose context `stream` belongs to, or null
  // (cuMemAllocAsync takes memory from the stream's device).
  Allocator* allocator_of_stream(CUstream stream);
  // The allocator that owns `address` (a live block's start), or null.
  Allocator* owner_of(std::uintptr_t address);
  // Frees the live block starting at `address` in whichever pool holds it.
  // Only pools whose span holds the address are asked (a check without
  // their lock), in turn; one that holds no such block answers
  // invalid_value, as this does when none does. No pool is locked only to
  // find the owner first.
  util::Status deallocate(std::uintptr_t address, std::uintptr_t stream, bool ordered);
  // The allocator whose segments contain `address`, live or not, or null.
  Allocator* segment_owner_of(std::uintptr_t address);

  void note_passthrough_allocation(int device) noexcept;

  // The program made a memory pool of its own a device's current pool
  // (cuDeviceSetMemPool), or destroyed one (which may make the default
  // current again): each device's current pool is asked again. A device
  // whose current pool is not its default one has its stream-ordered
  // allocations served by that pool, as the program asked, not by tidepool.
  void memory_pools_changed();
  // Whether a stream-ordered allocation on `stream` (asked with `device`
  // current) is for a pool the program chose: then it goes to the driver.
  // One relaxed load while no device has one.
  bool allocation_for_program_pool(int device, CUstream stream) {
    return program_pools_.load(std::memory_order_relaxed) != 0 && program_pool_for(device, stream);
  }

  // The program (or a library in it) made or released device memory with the
  // driver's VMM calls (cuMemCreate, cuMemRelease): counted in the report
  // by who made it, and against the device's budget.
  void foreign_created(CUmemGenericAllocationHandle handle, const CUmemAllocationProp& prop, std::size_t bytes,
                       std::uintptr_t caller);
  void foreign_released(CUmemGenericAllocationHandle handle) { foreign_.released(handle); }
  void foreign_mapped(std::uintptr_t address, std::size_t bytes, CUmemGenericAllocationHandle handle) {
    foreign_.mapped(address, bytes, handle);
  }
  void foreign_unmapped(std::uintptr_t address, std::size_t bytes) { foreign_.unmapped(address, bytes); }
  // An allocation the driver served for the program while tidepool serves
  // (a memory pool of its own): held outside the pool, until driver_freed.
  void driver_allocated(CUdeviceptr address, std::size_t bytes, std::uintptr_t caller);
  void driver_freed(CUdeviceptr address) { foreign_.freed(static_cast<std::uintptr_t>(address)); }
  // CUDA IPC on pool memory (ipc_sharing.hpp); null in pass-through mode.
  [[nodiscard]] IpcSharing* ipc() noexcept { return ipc_.get(); }
  [[nodiscard]] const ForeignMemory& foreign() const noexcept { return foreign_; }

  // Why a device may reach another's memory natively: peer access between
  // contexts (cuCtxEnablePeerAccess, for cuMemAlloc memory) or the access
  // of the owner's default memory pool (cuMemPoolSetAccess, for
  // cuMemAllocAsync memory). tidepool serves both kinds from one pool, so
  // either grants the accessor every pool page; it loses them when neither
  // is left.
  enum class PeerGrant : std::uint8_t { context, memory_pool };
  // Peer access changed at the driver (from a context of `accessor` to one
  // of `owner`, or the owner's default pool opened to `accessor`; or their
  // undoing): the owner's pool grants the accessor access to its pages, or
  // takes it back; a pool made later starts with it. Fails, changing
  // nothing it could undo, when the pool could not set the access.
  util::Status peer_access_changed(int accessor, int owner, bool enabled, PeerGrant why);
  // From the current context to `peer`'s, as cuCtxEnablePeerAccess names them.
  util::Status peer_access_changed(CUcontext peer, bool enabled);
  // cuMemPoolSetAccess succeeded on `pool`: if it is a device's default pool
  // (whose stream-ordered allocations tidepool serves), each device the
  // list names is granted or refused that device's pool pages.
  util::Status memory_pool_access_changed(CUmemoryPool pool, const CUmemAccessDesc* map, std::size_t count);

  // Stream lifetimes, as the fronts see them: the registry learns of them, and
  // on destruction every allocator's pool too. No-ops in pass-through mode.
  void stream_created(CUstream stream);
  void stream_destroying(CUstream stream);
  void stream_destroy_failed(CUstream stream);
  // Every stream creation of the process reaches stream_created() (the
  // preload's hooks are what the process calls); see order::StreamRegistry.
  void set_streams_complete(bool complete) noexcept;
  // A submission is about to be queued on `stream` (the preload's launch,
  // copy, set and graph-launch hooks, before the driver): the registry's
  // legacy_only ends at the first that is not on the legacy stream, and a
  // stream's slot is returned when barriers may leave it to catch up: it
  // goes to stream_catching_up() right before the driver call and to
  // stream_submitted() once that call has returned.
  order::StreamFollowers::Slot* stream_used(CUstream stream) noexcept {
    return streams_ != nullptr ? streams_->using_stream(stream) : nullptr;
  }
  void stream_catching_up(CUstream stream, order::StreamFollowers::Slot* slot) noexcept {
    if (streams_ != nullptr) streams_->catching_up(stream, slot);
  }
  // The submission was queued: on a followed stream (`slot`), or on one no
  // slot follows (null: the legacy stream and the streams its order takes in).
  void stream_submitted(order::StreamFollowers::Slot* slot) noexcept {
    if (slot != nullptr) {
      order::StreamRegistry::submitted(slot);
    } else if (streams_ != nullptr) {
      streams_->submitted_unfollowed();
    }
  }
  // The program made `context` current: see order::StreamRegistry::made_current.
  void context_made_current(CUcontext context) {
    if (streams_ != nullptr) streams_->made_current(context);
  }
  // Whether a stream of the process may be capturing, so that a route must
  // ask the driver (cuStreamIsCapturing): true once any capture has begun
  // (the preload's begin-capture hooks call capture_beginning() before the
  // driver), and always where the capture probe does not vouch for the hooks
  // (captures_watched_). A program that never captures skips that question
  // on every allocation and stream-ordered free.
  [[nodiscard]] bool capture_possible() const noexcept {
    return !captures_watched_ || captures_begun_.load(std::memory_order_acquire);
  }
  void capture_beginning() noexcept { captures_begun_.store(true, std::memory_order_release); }
  // A launch with programmatic stream serialization is about to be queued
  // in the current context: see order::StreamRegistry::overlapping_launch.
  void overlapping_launch();
  // Null in pass-through mode.
  [[nodiscard]] order::StreamRegistry* streams() const noexcept { return streams_.get(); }

  // Submissions under eviction (TIDEPOOL_CONF evict:on): the preload's hooks
  // call before_launch() with each launch's arguments and before_copy()
  // with each copy's and set's device addresses, then the driver, then
  // after_submission(). The pool blocks named are marked used and pinned
  // until after_submission (no page of theirs moves meanwhile: see
  // pool/page_mover.hpp), and with prefetch:launch or learn their pages on
  // the host come back before the submission runs.
  [[nodiscard]] bool guards_submissions() const noexcept { return launch_scanner_ != nullptr; }
  void before_launch(CUfunction function, void** params, void** extra, CUstream stream, Submission* s);
  // `first` and `second`: the device addresses a copy or set touches (0: none).
  // A batch calls it once per operation with the same Submission.
  void before_copy(std::uintptr_t first, std::uintptr_t second, CUstream stream, Submission* s);
  void after_submission(const Submission& s);
  // A scan above stopped partway (it threw): the submission may name blocks
  // it did not reach, as a launch whose parameters cannot be read may.
  void scan_failed() noexcept;
  // The context `stream` (a handle as the hooks pass it) queues work in,
  // and its device; a null context when it cannot be told, or when the
  // process has only ever had one context (then every submission that names
  // a block is the pool's own context's). One driver call for a pool's own
  // context, a few for another.
  struct StreamPlace {
    CUcontext context = nullptr;
    int device = -1;
  };
  StreamPlace launching_place(CUstream stream);
  // before_launch with one pool and one context in the process (a process
  // per GPU, the common case): its span in registers, no per-pool
  // bookkeeping.
  [[gnu::noinline]] void before_launch_one_pool(Allocator* a, CUfunction function, void** params, void** extra,
                                                CUstream stream, Submission* s);
  // before_launch with several pools: each pool's words gathered apart.
  [[gnu::noinline]] void before_launch_pools(CUfunction function, void** params, void** extra, CUstream stream,
                                             Submission* s);
  // launching_place(), asked once, when a submission first names a pool
  // block.
  class LaunchingDevice {
   public:
    // `kernels`: the submission is kernel launches only, which reach another
    // device's pool only through peer access (a page's access list names
    // the devices that may touch it); copies reach any device's memory.
    LaunchingDevice(Runtime& runtime, CUstream stream, bool kernels)
        : runtime_(runtime), stream_(stream), kernels_(kernels) {}
    // Whether the submission's context is another than `a`'s, whose gates
    // order only its own context's streams: another device's (through peer
    // access, or a copy), or another context on `a`'s device.
    bool other_than(const Allocator* a) {
      if (!asked_) {
        place_ = runtime_.launching_place(stream_);
        asked_ = true;
      }
      if (place_.context == nullptr || place_.context == a->context()) return false;
      // Without peer access only a context on its own device reaches it.
      if (kernels_ && a->space().peers() == 0) return place_.device == a->device();
      return true;
    }

   private:
    Runtime& runtime_;
    CUstream stream_;
    bool kernels_;
    bool asked_ = false;
    StreamPlace place_;
  };
  // CUDA graphs under eviction (see graph_holds.hpp): an instantiation's
  // kernel nodes are scanned and their blocks held on the device until the
  // graph is destroyed; each launch of it is guarded as a launch is.
  // Also after cuGraphExecUpdate, with the graph it took: the new kernels'
  // blocks are held too (the old holds last until the graph is destroyed).
  void graph_instantiated(CUgraphExec exec, CUgraph graph);
  // cuGraphExecKernelNodeSetParams gave one of its kernels new arguments.
  void graph_kernel_set(CUgraphExec exec, CUfunction function, void** params, void** extra);
  // cuGraphExecMemcpyNodeSetParams / MemsetNodeSetParams: one of its copies
  // or sets touches `first` and `second` now (0: none).
  void graph_copy_set(CUgraphExec exec, std::uintptr_t first, std::uintptr_t second);
  // The device addresses a memcpy node's parameters read and write (0 for a
  // side in host memory or an array).
  static std::pair<std::uintptr_t, std::uintptr_t> copy_addresses(const CUDA_MEMCPY3D& copy) noexcept;
  void before_graph_launch(CUgraphExec exec, CUstream stream, Submission* s);
  void graph_destroying(CUgraphExec exec);

  // The report as of now; its run's end time is now. With `give_up_at`, a
  // device whose pool is still busy then is left out of the figures
  // (DeviceReport::complete false) rather than waited for: the exit path.
  [[nodiscard]] Report report(std::optional<std::chrono::steady_clock::time_point> give_up_at = std::nullopt) const;
  // Writes the report to `path`, or to the configured path when empty.
  util::Status write_report(const std::string& path = {}) const;
  // Flushes what must survive exit: the trace and the report (when configured).
  void finish() noexcept;

 private:
  // get() the first time: makes the runtime, which is never destroyed.
  [[gnu::cold, gnu::noinline]] static Runtime& create();
  static std::atomic<Runtime*> instance_;
  explicit Runtime(const Config& config);

  Config config_;
  RunInfo run_;  // the run's metadata as of its start
  bool passthrough_ = false;
  std::unique_ptr<driver::Driver> driver_;
  std::unique_ptr<CallSites> call_sites_;                     // outlives the trace, which names its tags
  std::unique_ptr<TraceRecorder> trace_;                      // outlives the allocators: ~Runtime deletes them first
  std::unique_ptr<order::StreamRegistry> streams_;            // likewise
  std::unique_ptr<residency::LaunchScanner> launch_scanner_;  // with evict:on
  bool interposed_ = false;                                   // the preload's hooks are in the process
  bool captures_watched_ = false;                             // the capture probe held (capture_possible())
  std::atomic<bool> captures_begun_{false};                   // capture_possible(); never cleared
  bool bring_back_at_launch_ = false;                         // prefetch:launch/learn
  GraphHolds graph_holds_;
  struct KernelNode {
    CUfunction function;
    void** params;
    void** extra;
  };
  // What a graph's nodes name: its kernels, and the addresses its copies
  // and sets touch.
  struct GraphUse {
    std::vector<KernelNode> kernels;
    std::vector<std::uintptr_t> addresses;
    // Nodes whose memory could not be read (a kernel node without its
    // parameters, a conditional node's bodies, child graphs too deep): its
    // launches may use any block, as an unread launch may.
    bool unread = false;
  };
  // Adds `graph`'s nodes, and those of its child graphs (to `depth` levels).
  void read_graph(CUgraph graph, int depth, GraphUse* use) const;
  void hold_for_graph(CUgraphExec exec, const GraphUse& use);
  std::mutex create_lock_;
  std::array<std::atomic<Allocator*>, kMaxDevices> allocators_{};
  // By owner device: the devices with peer access to it, one bit each. Under create_lock_.
  std::array<std::uint64_t, kMaxDevices> context_peers_{};
  std::array<std::uint64_t, kMaxDevices> memory_pool_peers_{};
  ForeignMemory foreign_;
  std::unique_ptr<IpcSharing> ipc_;  // its thread uses the allocators: ~Runtime ends it first
  // Devices whose current memory pool is one the program set, and how many.
  std::mutex pools_lock_;
  std::array<std::atomic<bool>, kMaxDevices> program_pool_{};
  std::atomic<int> program_pools_{0};
  bool program_pool_for(int device, CUstream stream);
  // Pairs of devices with peer access now: while none, a launch that names
  // a block of the only pool is that pool's device's (before_launch).
  std::atomic<int> peer_pairs_{0};
  // The same allocators in the order they were made, the first `created_`
  // set: the launch scan and the owner lookups visit only those, not every
  // device slot (a launch's words would each cost kMaxDevices loads).
  std::array<std::atomic<Allocator*>, kMaxDevices> in_order_{};
  std::atomic<int> created_{0};
  // allocator()'s slow path: creates the device's allocator on first use.
  Allocator* create_allocator(int device);
  template <typename F>
  Allocator* find_allocator(F&& matches) const {
    const int count = created_.load(std::memory_order_acquire);
    for (int i = 0; i < count; ++i) {
      Allocator* a = in_order_[static_cast<std::size_t>(i)].load(std::memory_order_acquire);
      if (a != nullptr && matches(a)) return a;
    }
    return nullptr;
  }
  std::array<std::atomic<bool>, kMaxDevices> failed_{};
  static constexpr unsigned kCreateAttempts = 3;
  std::array<std::atomic<unsigned>, kMaxDevices> create_attempts_{};
  std::array<std::atomic<std::uint64_t>, kMaxDevices> passthrough_allocations_{};
  // Launch prefetch's view of the program's launches, for the report: how
  // many the hooks scanned, how many of those named a pool block, and how
  // many could not be read. Per thread, so that a launch counts without an
  // atomic read-modify-write.
  enum LaunchCount : std::size_t { kLaunchesScanned, kLaunchesNamingBlocks, kLaunchesUnread, kLaunchCounts };
  util::ThreadCounts<kLaunchCounts> launch_counts_;
  std::atomic<bool> finished_{false};
  const pid_t owner_pid_;  // the process that created this Runtime

  static bool forked_passthrough() noexcept;  // logs the first pass-through, returns true
  static std::atomic<bool> forked_child_;     // set in a forked child, by a pthread_atfork handler
};

}  // namespace tidepool::runtime
