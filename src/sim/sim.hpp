// Shared state of the simulated driver. Every entry point takes `g.lock`
// (a recursive-free std::mutex) only around bookkeeping, never while waiting
// on stream work, so workers can always make progress.
//
// Device pointers are host addresses: device memory is host memory mapped
// at the addresses the sim hands out, so tests read and write it directly.
//
// Contexts: one primary context per device (TIDEPOOL_SIM_DEVICES), and any
// cuCtxCreate makes. Each has its own legacy default stream; streams and events belong to the context
// current when they were created. Stream capture is modelled as a small
// graph of opaque nodes (see streams.cpp).
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sim/sim_control.h"

#define TIDEPOOL_SIM_EXPORT extern "C" __attribute__((visibility("default")))

// Older ABI variants that cuda.h hides behind macros naming the newest one;
// the sim exports them under their own names, as the driver does.
#undef cuEventElapsedTime
#undef cuStreamBeginCapture
#undef cuStreamGetCaptureInfo
#undef cuIpcOpenMemHandle
extern "C" {
CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end);
CUresult cuStreamBeginCapture(CUstream stream);
CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags);
CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice device);
CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* affinity, int count, unsigned int flags, CUdevice device);
CUresult cuStreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id);
CUresult cuStreamGetCaptureInfo_v2(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                   const CUgraphNode** dependencies, std::size_t* count);
// Per-thread-default-stream variants, which cuda.h declares only for the
// driver's own build.
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shared_bytes, CUstream stream, void** params, void** extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra);
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream);
CUresult cuStreamBeginCapture_ptsz(CUstream stream);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode);
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream stream, CUgraph graph, const CUgraphNode* dependencies,
                                          const CUgraphEdgeData* edges, std::size_t count, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph);
CUresult cuStreamWaitValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned flags);
CUresult cuStreamWaitValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned flags);
CUresult cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned flags);
CUresult cuStreamWriteValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned flags);
CUresult cuStreamBatchMemOp_v2_ptsz(CUstream stream, unsigned count, CUstreamBatchMemOpParams* ops, unsigned flags);
CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes, std::size_t count,
                                    CUmemcpyAttributes* attrs, std::size_t* attrs_idxs, std::size_t num_attrs,
                                    CUstream stream);
// cuMemcpyBatchAsync of CUDA 12.8 and 12.9 (with failIdx), which cuda.h
// renames to the _v2.
CUresult tidepool_sim_cuMemcpyBatchAsync_v1(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes, std::size_t count,
                                            CUmemcpyAttributes* attrs, std::size_t* attrs_idxs, std::size_t num_attrs,
                                            std::size_t* fail_idx, CUstream stream) __asm__("cuMemcpyBatchAsync");
CUresult tidepool_sim_cuMemcpyBatchAsync_v1_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes,
                                                 std::size_t count, CUmemcpyAttributes* attrs, std::size_t* attrs_idxs,
                                                 std::size_t num_attrs, std::size_t* fail_idx,
                                                 CUstream stream) __asm__("cuMemcpyBatchAsync_ptsz");
// The stream memory operations of CUDA before 11.7, which cuda.h renames to
// their _v2: the same operations here.
CUresult tidepool_sim_cuStreamWriteValue32_v1(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                              unsigned int flags) __asm__("cuStreamWriteValue32");
CUresult tidepool_sim_cuStreamWriteValue32_v1_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                                   unsigned int flags) __asm__("cuStreamWriteValue32_ptsz");
CUresult tidepool_sim_cuStreamWriteValue64_v1(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                              unsigned int flags) __asm__("cuStreamWriteValue64");
CUresult tidepool_sim_cuStreamWriteValue64_v1_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                                   unsigned int flags) __asm__("cuStreamWriteValue64_ptsz");
CUresult tidepool_sim_cuStreamWaitValue32_v1(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                             unsigned int flags) __asm__("cuStreamWaitValue32");
CUresult tidepool_sim_cuStreamWaitValue32_v1_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                                  unsigned int flags) __asm__("cuStreamWaitValue32_ptsz");
CUresult tidepool_sim_cuStreamWaitValue64_v1(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                             unsigned int flags) __asm__("cuStreamWaitValue64");
CUresult tidepool_sim_cuStreamWaitValue64_v1_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                                  unsigned int flags) __asm__("cuStreamWaitValue64_ptsz");
CUresult tidepool_sim_cuStreamBatchMemOp_v1(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* ops,
                                            unsigned int flags) __asm__("cuStreamBatchMemOp");
CUresult tidepool_sim_cuStreamBatchMemOp_v1_ptsz(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* ops,
                                                 unsigned int flags) __asm__("cuStreamBatchMemOp_ptsz");
// cuMemcpy3DBatchAsync: 13.0's per-thread form, and 12.8's (with failIdx),
// which cuda.h renames to the _v2.
CUresult cuMemcpy3DBatchAsync_v2_ptsz(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, unsigned long long flags,
                                      CUstream stream);
CUresult tidepool_sim_cuMemcpy3DBatchAsync_v1(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, std::size_t* fail_idx,
                                              unsigned long long flags,
                                              CUstream stream) __asm__("cuMemcpy3DBatchAsync");
CUresult tidepool_sim_cuMemcpy3DBatchAsync_v1_ptsz(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops,
                                                   std::size_t* fail_idx, unsigned long long flags,
                                                   CUstream stream) __asm__("cuMemcpy3DBatchAsync_ptsz");
}

namespace tidepool::sim {

class Stream;

struct Context {
  int device = 0;
  int retain_count = 0;
  std::shared_ptr<Stream> legacy;  // this context's legacy default stream
  bool created = false;            // by cuCtxCreate, not a device's primary context
  bool destroyed = false;          // by cuCtxDestroy: no call accepts it again
};

struct Graph;

// A captured operation: an opaque graph node with its dependencies.
// CUgraphNode handles are Node pointers.
struct Node {
  std::vector<CUgraphNode> dependencies;
  // What the node runs when its graph is launched (empty: nothing, as an
  // event node here), and for a kernel node its function and arguments.
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  std::function<void()> work;
  CUfunction function = nullptr;
  std::shared_ptr<std::vector<std::vector<unsigned char>>> arguments;
  std::vector<void*> argument_pointers;  // into `arguments`, for cuGraphKernelNodeGetParams
  CUDA_MEMCPY3D copy{};                  // a memcpy node's (cuGraphMemcpyNodeGetParams)
  CUDA_MEMSET_NODE_PARAMS set{};         // a memset node's (cuGraphMemsetNodeGetParams)
  std::unique_ptr<Graph> child;          // a child-graph node's own copy (cuGraphChildGraphNodeGetGraph)
};

// An instantiated graph: its nodes' work in capture order (a topological
// order), run as one item of the stream it is launched on.
struct GraphExec {
  std::vector<std::function<void()>> work;
};

// What cuStreamEndCapture hands out. Memory nodes are kept so that
// destroying the graph can release what the graph both allocated and freed.
struct Graph {
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<std::uintptr_t> allocations;  // cuMemAllocAsync during capture
  std::vector<std::uintptr_t> frees;        // cuMemFreeAsync during capture
};

// One capture sequence: begun on `origin`, joined by streams that waited on
// an event recorded in it, ended by cuStreamEndCapture on `origin`.
struct Capture {
  std::uint64_t id = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id thread;  // the thread that began it
  Context* context = nullptr;
  Stream* origin = nullptr;
  bool invalidated = false;
  bool ended = false;
  // The graph the capture makes, or, for cuStreamBeginCaptureToGraph, none:
  // its nodes go into the program's graph (`into`), which keeps them.
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Graph* into = nullptr;
  [[nodiscard]] Graph* target() const { return into != nullptr ? into : graph.get(); }
  std::vector<std::weak_ptr<Stream>> streams;  // origin and joined streams
};

// Where an event was recorded: complete when the stream finished `sequence`.
// An event recorded during capture is part of the capture instead.
struct Event {
  Context* context = nullptr;
  std::shared_ptr<Stream> stream;
  std::uint64_t sequence = 0;
  std::shared_ptr<Capture> capture;   // set when last recorded in a capture
  std::vector<CUgraphNode> frontier;  // the captured work the record covers
  // Shared with the record's stream work, so that cuEventDestroy can return
  // at once, as the driver does, while that work is still queued (behind a
  // cuStreamWaitValue32 that may never be satisfied, say).
  std::shared_ptr<std::atomic<std::int64_t>> completed_at = std::make_shared<std::atomic<std::int64_t>>(0);
  unsigned flags = 0;
};

class Stream : public std::enable_shared_from_this<Stream> {
 public:
  Stream(unsigned flags, bool legacy, Context* context);
  ~Stream();
  // Enqueues work; returns its sequence number (1-based).
  std::uint64_t enqueue(std::function<void()> work);
  [[nodiscard]] std::uint64_t completed() const noexcept { return completed_.load(std::memory_order_acquire); }
  [[nodiscard]] std::uint64_t enqueued() const;
  void wait_for(std::uint64_t sequence) const;
  void synchronize() const { wait_for(enqueued()); }
  // Returns once the queue holds fewer than `depth` items not yet started
  // (0: at once). Not on the stream's own worker, which would wait on itself.
  void wait_for_room(std::size_t depth);
  // The virtual clock (clock.cpp). Whether this stream will do nothing more
  // until the host acts or the clock moves: its queue empty and nothing
  // running, or its worker waiting for the clock or for another stream's
  // work that has not finished.
  [[nodiscard]] bool quiet() const;
  // The end of the clock wait the worker is in, or 0 (clock.cpp).
  [[nodiscard]] std::uint64_t clock_wait_end() const noexcept {
    return clock_wait_end_.load(std::memory_order_acquire);
  }
  // On this stream's worker, in a kernel: holds the stream for `ns` of the
  // virtual clock after the stream's device time (tidepool_sim_run_for).
  void run_for(std::uint64_t ns);
  // The stream whose worker is the calling thread, or null (the host).
  static Stream* of_this_thread() noexcept;
  // Where on the clock completed item `sequence` ended; 0 once it is too old
  // to be remembered (it ended before anything now waiting on it started).
  // Under State::progress_lock.
  [[nodiscard]] std::uint64_t ended_at_locked(std::uint64_t sequence) const noexcept {
    return completed() - sequence < ended_at_.size() ? ended_at_[sequence % ended_at_.size()] : 0;
  }
  [[nodiscard]] bool blocking() const noexcept { return (flags_ & CU_STREAM_NON_BLOCKING) == 0; }
  [[nodiscard]] bool legacy() const noexcept { return legacy_; }
  [[nodiscard]] unsigned flags() const noexcept { return flags_; }
  [[nodiscard]] Context* context() const noexcept { return context_; }
  void stop();
  // The status tidepool_sim_set_capturing forces cuStreamIsCapturing to report.
  std::atomic<int> forced_capture{0};
  // Copies and sets run on this stream that reached VA mapped to host-located
  // memory (tidepool_sim_host_resident_copies). Shared with queued work, which
  // may run after the handle is destroyed.
  std::shared_ptr<std::atomic<std::uint64_t>> host_resident_copies = std::make_shared<std::atomic<std::uint64_t>>(0);
  // The capture this stream takes part in, and the captured nodes its next
  // captured operation depends on. Guarded by State::lock.
  std::shared_ptr<Capture> capture;
  std::vector<CUgraphNode> frontier;
  std::vector<CUgraphEdgeData> edge_data;  // zeroed, parallel to frontier, for cuStreamGetCaptureInfo_v3

 private:
  void run();
  unsigned flags_;
  bool legacy_;
  Context* context_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable room_;  // an item left the queue
  std::deque<std::function<void()>> queue_;
  // The virtual clock's time at each queued item's enqueue, parallel to
  // queue_ (clock.cpp).
  std::deque<std::uint64_t> enqueued_at_;
  std::atomic<bool> running_{false};    // an item taken from queue_ and not done
  const Stream* waiting_on_ = nullptr;  // the worker waits for its item waiting_for_
  std::uint64_t waiting_for_ = 0;
  // The worker's own: how far this stream's device has run on the clock.
  std::uint64_t device_ns_ = 0;
  std::atomic<std::uint64_t> clock_wait_end_{0};
  // Where on the clock the last completed items ended, by sequence number
  // modulo the size; guarded by State::progress_lock. A worker that waited
  // for one runs on from there.
  std::array<std::uint64_t, 1024> ended_at_{};
  std::uint64_t enqueued_ = 0;
  std::atomic<std::uint64_t> completed_{0};
  bool stopping_ = false;
  std::thread worker_;
};

// Physical memory (CUmemGenericAllocationHandle handles are Physical
// pointers): a memfd named for where the memory lives, "tidepool-sim-device-N"
// or "tidepool-sim-host", so that a process importing it from a file
// descriptor (cuMemImportFromShareableHandle) learns its location by
// readlink("/proc/self/fd/FD"), which reads "/memfd:NAME (deleted)".
struct Physical {
  int fd = -1;
  std::size_t size = 0;
  bool on_device = true;
  int device = 0;  // where device-located memory lives
  int maps = 0;
  bool released = false;
  CUmemLocation location{};  // as cuMemCreate was given it (cuMemGetAllocationPropertiesFromHandle)
  // The shareable handle types cuMemCreate was asked for (requestedHandleTypes):
  // CU_MEM_HANDLE_TYPE_NONE or CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.
  CUmemAllocationHandleType handle_types = CU_MEM_HANDLE_TYPE_NONE;
  // Its memfd has left the sim (cuMemExportToShareableHandle): another
  // process may map it still, so it is closed at the end, never kept as a
  // spare file that a later cuMemCreate would reuse (two allocations would
  // then share their bytes).
  bool exported = false;
  // Made by cuMemImportFromShareableHandle over another allocation's memfd:
  // the same physical memory, so it takes no capacity, and its file is
  // never a spare either.
  bool imported = false;
};

struct Mapping {
  std::size_t size = 0;
  Physical* physical = nullptr;
  std::size_t offset = 0;
  // The devices cuMemSetAccess granted, one bit each: a kernel on a device
  // outside both faults (device_may_touch), as on a GPU; the host
  // protection is their union.
  std::uint64_t readers = 0;
  std::uint64_t writers = 0;
  std::uint64_t buffer_id = 0;  // unique for the life of the process, as the driver promises
};

// `array`: a CUDA array's storage (arrays.cpp), device memory no pointer
// of the program's reaches.
enum class AllocationKind { device, host, managed, array };
struct Allocation {
  std::size_t size = 0;
  AllocationKind kind = AllocationKind::device;
  std::size_t pitch = 0;
  int device = 0;                  // the device of the context it was made in
  std::uint64_t buffer_id = 0;     // unique for the life of the process, as the driver promises
  struct MemPool* pool = nullptr;  // the memory pool of a stream-ordered allocation
  // Device memory is a memfd mapped MAP_SHARED, so that legacy IPC
  // (cuIpcGetMemHandle) can hand it to another process: open for as long as
  // the allocation lives (-1: anonymous memory, as host allocations are).
  int fd = -1;
  // Opened from another process's cuIpcGetMemHandle (cuIpcOpenMemHandle):
  // the exporter's memory, not counted against this process's capacity;
  // `opens` counts the opens cuIpcCloseMemHandle has yet to undo.
  bool ipc_import = false;
  int opens = 0;
};

// A memory pool (CUmemoryPool handles are MemPool pointers): each device has a
// default one, the current one at first; cuMemAllocAsync takes from the
// current one of the stream's device, cuMemAllocFromPoolAsync from the one
// it names. The sim allocates each block on its own, as for cuMemAlloc: a
// pool here is who an allocation belongs to, not a cache.
struct MemPool {
  int device = 0;
  bool is_default = false;
  // Other devices given access (cuMemPoolSetAccess), one bit each. Peer
  // access between contexts does not open a pool's memory; this does.
  std::uint64_t access = 0;
};

struct ReferenceKernel;
struct Kernel;

// A loaded module (cuModuleLoadData): the functions asked of it, by name.
struct Module {
  Context* context = nullptr;
  std::unordered_map<std::string, Kernel*> functions;  // owned by State::kernels
};

struct Kernel {
  tidepool_sim_kernel_fn fn = nullptr;
  void* user_data = nullptr;
  std::vector<std::size_t> sizes;
  std::vector<std::size_t> offsets;
  // tidepool_sim_set_kernel_extent: the range the kernel touches beyond the
  // words of its arguments (the base pointer's parameter, the count's, and
  // the bytes per element); unset without it.
  bool has_extent = false;
  std::size_t extent_pointer = 0;
  std::size_t extent_count = 0;
  std::size_t extent_element = 0;
  // Registered as a library kernel (tidepool_sim_register_library_kernel):
  // its handle is a CUkernel, which cuLaunchKernel takes cast to
  // CUfunction, and only cuKernelGetParamInfo describes.
  bool library = false;
  // A kernel of a loaded module (modules.cpp), run through the sim's
  // reference of it; `unloaded` once its module is.
  const ReferenceKernel* reference = nullptr;
  std::atomic<bool> unloaded{false};
};

struct Fault {
  unsigned countdown = 0;
  CUresult result = CUDA_SUCCESS;
};

// Leaked on purpose (see state()): stream workers use it until the process
// is gone, so nothing here may be destroyed at exit.
struct State {
  std::uint64_t next_buffer_id = 0;  // CU_POINTER_ATTRIBUTE_BUFFER_ID: never repeats
  std::mutex lock;
  bool initialized = false;
  int device_count = 1;
  std::size_t capacity = 0;
  std::size_t granularity = 0;
  std::size_t device_used = 0;
  std::size_t host_used = 0;
  std::vector<std::unique_ptr<Context>> contexts;  // primary context per device
  // Contexts cuCtxCreate made, in order, destroyed ones too: a handle stays
  // an address no later context reuses, so a stale one is always refused.
  // Guarded by contexts_lock (taken after `lock` where both are held).
  std::vector<std::unique_ptr<Context>> created_contexts;
  std::mutex contexts_lock;
  // Peer access: bit `owner` of peers[accessor] is set while the accessor
  // device's context has enabled access to the owner's (cuCtxEnablePeerAccess).
  // It opens the owner's cuMemAlloc memory to the accessor; VMM mappings
  // answer only to their own access lists.
  std::vector<std::uint64_t> peers;
  std::vector<MemPool*> default_pools;  // by device
  std::vector<MemPool*> current_pools;  // by device (cuDeviceSetMemPool)
  // Every pool made, default ones included; a destroyed one stays here
  // (allocations name it) but is no longer valid.
  std::unordered_map<MemPool*, std::unique_ptr<MemPool>> pools;
  std::unordered_set<const MemPool*> live_pools;
  std::map<std::uintptr_t, Allocation> allocations;    // cuMemAlloc / host allocations by base
  std::map<std::uintptr_t, std::size_t> reservations;  // VA reservations by base
  std::map<std::uintptr_t, Mapping> mappings;          // VMM mappings by base
  std::unordered_map<Physical*, std::unique_ptr<Physical>> physicals;
  // Released physical memory kept for reuse: a fresh memfd faults in and
  // zeroes every 4 KiB page on its first touch, which would make the sim's
  // copies into new pages run at a fraction of any real link's bandwidth.
  // The driver does not promise zeroed memory either. Bounded by
  // kSpareFileBytes.
  // A spare file is reused only for memory of the location its name gives
  // (see Physical).
  struct SpareFile {
    std::size_t size = 0;
    int fd = -1;
    bool on_device = true;
    int device = 0;
  };
  std::vector<SpareFile> spare_files;
  std::size_t spare_file_bytes = 0;
  // Legacy IPC (cuIpcGetMemHandle): a random number naming this process's
  // allocations' memfds beside their buffer ids, so that a handle whose
  // process is gone cannot open another process's memory that happens to
  // hold the same pid and file descriptor number.
  std::uint64_t ipc_nonce = 0;
  // The handles this process has opened (cuIpcOpenMemHandle), by the
  // exporter's (nonce, buffer id): the base each one is mapped at.
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uintptr_t> ipc_opened;
  std::unordered_map<Stream*, std::shared_ptr<Stream>> streams;  // created streams (and per-thread ones)
  // Destroyed streams whose queued work has yet to finish: the driver
  // returns from cuStreamDestroy at once, yet a context synchronisation and
  // the legacy stream (for blocking streams) still wait for that work.
  std::vector<std::shared_ptr<Stream>> retiring;
  std::unordered_map<Event*, std::unique_ptr<Event>> events;
  std::unordered_map<Kernel*, std::unique_ptr<Kernel>> kernels;
  std::unordered_map<Module*, std::unique_ptr<Module>> modules;  // loaded (cuModuleLoadData)
  std::unordered_map<Graph*, std::unique_ptr<Graph>> graphs;     // ended captures' graphs
  std::unordered_set<const Graph*> child_graphs;                 // owned by child-graph nodes of those
  std::unordered_map<GraphExec*, std::shared_ptr<GraphExec>> graph_execs;
  std::vector<std::shared_ptr<Capture>> captures;  // capture sequences in progress
  std::uint64_t next_capture_id = 0;
  std::unordered_map<std::string, Fault> faults;
  std::unordered_map<std::string, Fault> signals;  // Fault::result holds the signal number
  std::unordered_map<std::string, std::uint64_t> calls;
  // TIDEPOOL_SIM_CALL_NS: host nanoseconds named entry points take on the
  // calling thread, as a driver's do (an H200 measured cuEventRecord on the
  // legacy stream at 217, cuEventQuery 1243); none named, the default: the
  // sim's own cost only. Guarded by `lock`; any_call_ns says whether to look.
  std::unordered_map<std::string, double> call_ns;
  std::atomic<bool> any_call_ns{false};
  // tidepool_sim_set_records_wait: cuEventRecord returns once its event is
  // complete, so tools that launch no work see the same answers every run.
  std::atomic<bool> records_wait{false};
  // The virtual clock (clock.cpp, tidepool_sim_set_virtual_clock): kernels
  // that call tidepool_sim_run_for hold their stream for virtual time, which
  // moves only when the host moves it or waits, so that which work is done
  // when the host looks does not depend on how fast the threads run.
  std::atomic<bool> virtual_clock{false};
  std::mutex clock_lock;
  std::condition_variable clock_moved;
  std::atomic<std::uint64_t> clock_ns{0};  // written under clock_lock
  // Items completed on every stream: a settle that saw none complete while
  // it looked saw one moment.
  std::atomic<std::uint64_t> completions{0};
  // The host<->device copy model: GB/s (1e9 bytes/s) each copy gets, 0 for
  // unlimited; read when a copy is enqueued (TIDEPOOL_SIM_COPY_GBPS,
  // tidepool_sim_set_copy_gbps). Bytes are counted when a copy runs.
  std::atomic<double> copy_gbps{0};
  // About how many items a stream holds queued before the host thread that
  // submits one more waits for room, as a GPU's work queue fills and a launch
  // then blocks (about a thousand kernels a stream, as observed on NVIDIA
  // GPUs): the device lags the host by about that much work at most.
  // TIDEPOOL_SIM_QUEUE_DEPTH, tidepool_sim_set_queue_depth; 0: unbounded.
  // Bounded by default, so that a program (a test, a replay, the preload)
  // that would wait on a GPU for room behind work only it can release hangs
  // here too, rather than pass on a device that lags without limit.
  static constexpr std::size_t kGpuQueueDepth = 1024;
  std::atomic<std::size_t> queue_depth{kGpuQueueDepth};
  // TIDEPOOL_SIM_VMM_US: host microseconds each VMM call takes per
  // granularity page, as a driver's ioctls do (an H100 measured 14.5 to
  // create, 1.3 to map, 33 to set access, 22 to unmap, 16 to release a 2 MiB
  // page); zero, the default: free. Indexed by VmmCall. A host-located
  // create pins its memory, which costs far more than a device page's:
  // `host_create`, else `create`'s.
  std::array<std::atomic<double>, 6> vmm_us{};
  std::atomic<std::uint64_t> copied_to_device{0};
  std::atomic<std::uint64_t> copied_to_host{0};
  // VMM mappings of host-located memory. While there are none, a launch
  // need not scan its parameters for pointers into them.
  std::atomic<std::size_t> host_mappings{0};
  std::atomic<std::uint64_t> host_resident_launches{0};
  std::atomic<std::uint64_t> host_resident_graph_copies{0};  // tidepool_sim_host_resident_graph_copies
  // The work running now (class Running), by the address ranges it may
  // touch: a kernel's argument words (one byte each) and declared extent, a
  // reference kernel's regions, a copy's source and destination, a set's or
  // stream memory operation's target. A cuMemUnmap of a range one of them
  // touches, or a cuMemSetAccess that takes away the access one of them
  // needs, is a fault on a GPU (CUDA_ERROR_ILLEGAL_ADDRESS, sticky for the
  // context). The sim counts it, tells the work (`hit`: a wait or a sliced
  // copy stops), and answers every later synchronisation with that error
  // (remap_faults).
  // `write`: the range is written (a read-only mapping refuses it).
  // `guessed`: an argument word that may be a pointer the kernel never
  // follows; an unmap under it still counts, but it does not fault alone.
  struct Touch {
    std::uintptr_t begin;
    std::uintptr_t end;
    bool write = false;
    bool guessed = false;
    [[nodiscard]] bool meets(std::uintptr_t from, std::uintptr_t to) const { return begin < to && from < end; }
  };
  struct RunningWork {
    std::uint64_t id = 0;
    std::vector<Touch> touches;
    std::atomic<bool>* hit = nullptr;
    const char* what = "";  // for the fault's report
  };
  std::mutex running_lock;
  std::uint64_t next_running = 0;
  std::vector<RunningWork> running;
  std::atomic<std::uint64_t> remap_faults{0};
  // Ranges unmapped under running work that touches them: backed by
  // anonymous scratch memory until that work is done, so that its stray
  // accesses land where nothing reads them instead of killing the process,
  // then made inaccessible reserved VA again (settle_under_work). Guarded
  // by `lock`, then `running_lock`.
  std::vector<Touch> scratch;
  // Reservations freed (cuMemAddressFree) while scratch in them was still
  // in use: unmapped from the process once it is not (settle_under_work).
  std::vector<Touch> freed_under_scratch;
  // Mappings whose access was taken away under running work that needs it,
  // and mappings made over scratch while its work still runs: their
  // protection stays as it was (read-write, for one over scratch) until
  // that work is done, so that its stray accesses do not kill the process,
  // then follows the access list (settle_under_work). Guarded as `scratch`.
  std::vector<Touch> access_kept;
  // How many ranges of `scratch` and `access_kept` wait to be settled, to
  // be read without either lock.
  std::atomic<std::size_t> unsettled_ranges{0};
  // Kernels, copies and sets that reached, when they started, reserved VA
  // with nothing mapped, or a mapping without the access they need: on a
  // GPU each one faults, sticky as above; the sim skips it and counts it.
  std::atomic<std::uint64_t> unmapped_faults{0};
  // Kernels that named device memory their device may not reach (another
  // device's, without peer access or an access grant): on a GPU each one
  // faults, sticky as above; the sim skips the kernel and counts it.
  std::atomic<std::uint64_t> access_faults{0};
  // Kernels whose loads or stores were off their alignment (a tidepool
  // kernel handed an unaligned stream or offset): on a GPU each one faults
  // with CUDA_ERROR_MISALIGNED_ADDRESS, sticky; the sim skips it and counts it.
  std::atomic<std::uint64_t> misaligned_faults{0};
  // Signalled whenever any stream finishes an item; waiters re-check.
  std::mutex progress_lock;
  std::condition_variable progress;
};

enum class VmmCall : std::size_t { create, map, set_access, unmap, release, host_create };
// The host time TIDEPOOL_SIM_VMM_US gives `call` on `bytes` (at least one
// page), spent on the calling thread outside the sim's lock.
void vmm_delay(VmmCall call, std::size_t bytes);
// Sets State::vmm_us from a TIDEPOOL_SIM_VMM_US spec (null: all free).
void set_vmm_us(State& s, const char* spec);
// Sets State::call_ns from a TIDEPOOL_SIM_CALL_NS spec (null: none).
void set_call_ns(State& s, const char* spec);

State& state();
// Counts a call of `name` and returns the injected result, or CUDA_SUCCESS.
CUresult enter(const char* name);
// CUDA_ERROR_NOT_INITIALIZED before cuInit, else the fault check.
CUresult enter_initialized(const char* name);
// The context current on this thread, or null.
Context*& current_context();
// The stream a handle names: null, CU_STREAM_LEGACY -> the current context's
// legacy stream; CU_STREAM_PER_THREAD -> this thread's stream in the current
// context. CUDA_ERROR_INVALID_CONTEXT for those without a current context,
// CUDA_ERROR_INVALID_HANDLE for an unknown handle.
CUresult resolve_stream(CUstream handle, std::shared_ptr<Stream>* out);

// How a stream operation went: run (enqueued as `sequence`) or captured
// into `capture`'s graph as `node`, or refused with `result`.
struct Submitted {
  CUresult result = CUDA_SUCCESS;
  std::uint64_t sequence = 0;
  std::shared_ptr<Capture> capture;
  Node* node = nullptr;
};
// Submits `work` to `stream`: enqueued with legacy-stream ordering applied,
// or captured while the stream captures (kept in the capture's node, run
// only when its graph is launched). Refused with
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED on an invalidated capture, and with
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (invalidating the captures) on the
// legacy stream while a blocking stream of its context captures.
// `on_capture`, when the work is captured: called with its node under the
// sim's lock, to say what the node is (a kernel's function and arguments;
// a memory node's work, which a graph launch must not repeat, cleared).
Submitted submit(const std::shared_ptr<Stream>& stream, std::function<void()> work,
                 const std::function<void(Node&)>& on_capture = {});
// Queues a copy of `n` bytes on `stream` (streams.cpp), as cuMemcpyAsync
// does: a memcpy node while the stream captures; the host waits for it when
// `wait` or when `dst` is pageable; `read_now`, or a
// pageable `src`, reads the source before the call returns. Which side of
// the host-device link each end is on is decided when the copy runs.
CUresult queue_copy(const std::shared_ptr<Stream>& stream, void* dst, const void* src, std::size_t n, bool wait,
                    bool read_now);
// A synchronous copy (cuMemcpy, cuMemcpyHtoD, the array copies...) queued on
// `stream`, returning when the driver's documented host synchronisation
// says, by the memory type of each end (host_memory), not by where its
// pages are: to host memory, or from pinned host memory, once the copy is
// done; from pageable memory to the device, once the stream's earlier work
// is done and the source is staged, before the copy runs; between device
// memory (and arrays), at once.
CUresult synchronous_copy(const std::shared_ptr<Stream>& stream, void* dst, const void* src, std::size_t n);
// Stream capture checks for calls the driver calls "potentially unsafe"
// during capture (cuMemAlloc, cuMemFree, ...), per the calling thread's
// capture interaction mode: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, with the
// conflicting captures invalidated, or CUDA_SUCCESS.
CUresult check_unsafe_call();
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (invalidating them) while a stream
// of `context` captures, whatever the mode: synchronising the context would
// wait on a capture.
CUresult check_context_sync(Context* context);
// Waits for all work on every stream of `context`, or of all contexts.
void synchronize_context(Context* context);
// The stream whose worker is this thread (clock.cpp); null on the host.
Stream*& worker_stream();
// Every stream of `context`, or of all contexts, the legacy ones included.
std::vector<std::shared_ptr<Stream>> streams_of(Context* context);
// The virtual clock (clock.cpp). With it on, returns once every stream is
// quiet (Stream::quiet), so that what the host sees next is what the clock
// says; with it off, at once.
void settle_streams();
// With the clock on and called on the host: settles, then moves the clock to
// the next end of a clock wait until `done` holds or nothing waits on the
// clock. Returns whether `done` holds (false: the caller waits as usual).
bool advance_until(const std::function<bool()>& done);
void synchronize_all();
// Releases a device allocation made by cuMemAlloc/cuMemAllocAsync
// (memory.cpp); graph destruction uses it for its memory nodes.
CUresult release_device_allocation(std::uintptr_t base);
// A CUDA array's storage (arrays.cpp): `bytes` of the current device's
// memory, counted against its capacity, and its release.
CUresult allocate_array_storage(std::size_t bytes, std::uintptr_t* base);
CUresult release_array_storage(std::uintptr_t base);
std::int64_t now_ns();
// Where a copy engine finds the bytes at `address` (memory.cpp): on the
// host for pinned allocations, host-located VMM mappings and anything the
// sim did not allocate (pageable memory); on the device for cuMemAlloc
// memory, device-located mappings and unmapped reserved VA.
bool host_located(std::uintptr_t address);
// Whether `address` is host memory by its type, as the driver's synchronous
// copies and sets go by: pinned or managed allocations and pageable memory.
// VA that cuMemMap maps is device memory wherever its pages are now.
bool host_memory(std::uintptr_t address);
// Whether `address` is pageable host memory: nothing the sim allocated,
// mapped or reserved.
bool pageable(std::uintptr_t address);
// Whether any of `values`, read as an address, lies in a VA range mapped to
// host-located physical memory.
bool any_host_mapped(const std::uint64_t* values, std::size_t count);
// Whether any byte of [address, address + bytes) lies in VA mapped to
// host-located physical memory.
bool host_mapped_in(std::uintptr_t address, std::size_t bytes);
// Registers the ranges a kernel, copy or set touches in State::running
// for as long as it runs, then checks that each is there to touch: a range
// in reserved VA must be mapped, with access (write access where it is
// written). Registered first, so that an unmap racing the check is a remap
// fault either way. `reachable()` false: the work faulted (counted in
// State::unmapped_faults, the first reported on stderr as `what`, which is
// kept for a remap fault's report too: a string that outlives the work) and
// must not run. On leaving, what was unmapped, lost its access or was mapped
// over scratch under it is settled once no running work touches it
// (settle_under_work).
class Running {
 public:
  Running(const std::vector<State::Touch>& touches, const char* what);
  ~Running();
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;
  [[nodiscard]] bool reachable() const noexcept { return reachable_; }
  // Set once a range it touches was unmapped, or lost the access it needs,
  // under it: on a GPU it has faulted, so work that goes on (a wait, a copy
  // in slices) stops.
  [[nodiscard]] const std::atomic<bool>& hit() const noexcept { return hit_; }

 private:
  std::uint64_t id_ = 0;
  bool reachable_ = true;
  std::atomic<bool> hit_{false};
};
// The first address of `touches` (but guessed ones) in reserved VA that is
// not mapped, or is mapped without the access its touch needs; 0 when none
// (memory.cpp).
std::uintptr_t first_unreachable(const std::vector<State::Touch>& touches);
// For the ranges no running work touches any more: scratch becomes
// inaccessible reserved VA again, where nothing was mapped there since, and
// a mapping whose access was kept takes the protection its access list
// gives (memory.cpp).
void settle_under_work();
// Whether a kernel on `device` may touch everything in `touches` (their
// first bytes): memory of its own device, host memory, another device's
// cuMemAlloc memory with peer access enabled, its memory-pool allocations
// with the pool's access granted (cuMemPoolSetAccess), or a VMM mapping
// whose access list names the device. Otherwise the kernel faults, as on a GPU: counted in
// State::access_faults (the first reported on stderr), and false.
bool device_may_touch(int device, const std::vector<State::Touch>& touches);
// Runs a module kernel's reference on the stream's worker (modules.cpp).
void run_reference(const ReferenceKernel& kernel, void** params, const std::array<unsigned, 3>& grid, int device);
// CUDA_ERROR_ILLEGAL_ADDRESS once work has faulted (State::remap_faults,
// State::access_faults, State::unmapped_faults), CUDA_ERROR_MISALIGNED_ADDRESS
// once one has only been misaligned, else `result`: what a synchronisation
// answers.
CUresult after_faults(CUresult result);
// Whether [address, address + bytes) lies inside one allocation or VMM
// mapping the device can reach: device, pinned host, or mapped memory.
bool device_reachable(std::uintptr_t address, std::size_t bytes);

}  // namespace tidepool::sim
