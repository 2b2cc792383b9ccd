// Streams, events, kernels, copies and stream capture. Each stream runs its
// work in order on a worker thread of its own, asynchronously to the caller,
// so a missing event or synchronisation in the code under test shows up as a
// wrong result.
//
// Streams belong to the context current at cuStreamCreate; so do events (at
// cuEventCreate), and an event may only be recorded on a stream of its own
// context. Waiting on an event of another context is allowed.
//
// Legacy default stream (null / CU_STREAM_LEGACY), one per context: work on
// it waits for all work queued before it on the context's blocking streams,
// including destroyed ones whose work still runs, and later work on blocking
// streams waits for it. CU_STREAM_NON_BLOCKING streams are exempt.
// CU_STREAM_PER_THREAD names a blocking stream of the calling thread.
//
// Synchronous copies and sets wait on the host only where the driver's "API
// synchronization behavior" says they do (synchronous_copy): a copy between
// device memory or arrays, and a set on device memory, return at once; a
// copy from pageable memory returns once the stream's earlier work is done
// and the source is staged, before the copy itself runs.
//
// Stream capture (cuStreamBeginCapture .. cuStreamEndCapture): work sent to a
// capturing stream is not run but recorded as a node of the capture's graph,
// and runs when the graph, instantiated (cuGraphInstantiateWithFlags), is
// launched (cuGraphLaunch: its nodes in capture order, as one stream item).
// cuStreamBeginCaptureToGraph captures into a graph the program made
// (cuGraphCreate) after nodes of it that it names, and cuStreamEndCapture
// hands that graph back; it cannot be destroyed while a capture adds to it.
// Kernels, 1D copies and byte sets keep their parameters, as a GPU's
// kernel, memcpy and memset nodes do (cuGraph*NodeGetParams); a graph can
// be copied into another as a child-graph node (cuGraphAddChildGraphNode).
// What the sim enforces, after the driver's documentation:
//  - cuStreamSynchronize / cuStreamQuery of a capturing stream fail with
//    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate its capture; so does
//    cuCtxSynchronize while a stream of the context captures;
//  - the legacy stream, while a blocking stream of its context captures:
//    using it (work or synchronisation) fails with
//    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates those captures;
//    cuStreamIsCapturing / cuStreamGetCaptureInfo on it answer
//    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT without invalidating;
//  - an event recorded in a capture is part of it: cuEventQuery,
//    cuEventSynchronize and cuEventElapsedTime answer CUDA_ERROR_CAPTURED_EVENT
//    while the capture lasts; cuStreamWaitEvent on it joins the waiting stream
//    into the capture (CUDA_ERROR_STREAM_CAPTURE_MERGE if that stream is in
//    another capture); a capturing stream waiting on an event recorded outside
//    the capture fails with CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
//  - "potentially unsafe" calls (check_unsafe_call: cuMemAlloc, cuMemAllocPitch,
//    cuMemFree, cuMemAllocHost, cuMemHostAlloc, cuMemFreeHost, cuCtxSynchronize)
//    fail with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the
//    conflicting captures per the thread's cuThreadExchangeStreamCaptureMode;
//  - work on an invalidated capture fails with
//    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and so does cuStreamEndCapture
//    (returning a null graph); a stream forked into the capture and not
//    joined back into the origin makes it CUDA_ERROR_STREAM_CAPTURE_UNJOINED.
//  - cuMemAllocAsync / cuMemFreeAsync stay legal (graph memory nodes): the
//    allocation is made at once (its address stands for the graph's), the
//    free is recorded and not performed; destroying the graph (or a failed
//    capture) releases what the graph both allocated and freed.
// tidepool_sim_set_capturing only forces the status cuStreamIsCapturing and
// cuStreamGetCaptureInfo report; work still runs.
//
// A stream holds about 1024 items not yet started (TIDEPOOL_SIM_QUEUE_DEPTH,
// tidepool_sim_set_queue_depth; 0 for unbounded); submitting one more makes
// the host wait for room, as a GPU's full work queue makes a launch block, so
// the device lags the host by a bounded amount of work, never by a whole
// program.
//
// Copies between host and device memory (see host_located) take
// bytes / TIDEPOOL_SIM_COPY_GBPS of their stream's time when a bandwidth is
// set. Which way a copy goes is decided when it runs, as on a GPU, not when
// it is queued: a copy queued into a page that is remapped from the host to
// the device before the copy runs crosses the link and is counted so. A
// kernel whose arguments hold an address in host-located VMM memory is
// counted (tidepool_sim_host_resident_launches) when it runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "sim/sim.hpp"

namespace tidepool::sim {

Stream::Stream(unsigned flags, bool legacy, Context* context)
    : flags_(flags), legacy_(legacy), context_(context), worker_([this] { run(); }) {}

Stream::~Stream() { stop(); }

void Stream::stop() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  work_ready_.notify_all();
  room_.notify_all();
  if (!worker_.joinable()) return;
  // Work items drop what they hold before they count as done (see run()), so
  // the last reference should never go on the worker itself; never join it
  // from itself should that change.
  if (worker_.get_id() == std::this_thread::get_id()) {
    worker_.detach();
  } else {
    worker_.join();
  }
}

std::uint64_t Stream::enqueue(std::function<void()> work) {
  const std::uint64_t now = state().clock_ns.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> guard(mutex_);
  queue_.push_back(std::move(work));
  enqueued_at_.push_back(now);
  const std::uint64_t sequence = ++enqueued_;
  work_ready_.notify_one();
  return sequence;
}

void Stream::wait_for_room(std::size_t depth) {
  if (depth == 0 || worker_.get_id() == std::this_thread::get_id()) return;
  if (Stream::of_this_thread() == nullptr) {
    (void)advance_until([&] {
      std::lock_guard<std::mutex> guard(mutex_);
      return stopping_ || queue_.size() < depth;
    });
  }
  std::unique_lock<std::mutex> guard(mutex_);
  room_.wait(guard, [&] { return stopping_ || queue_.size() < depth; });
}

std::uint64_t Stream::enqueued() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return enqueued_;
}

void Stream::wait_for(std::uint64_t sequence) const {
  State& s = state();
  Stream* worker = Stream::of_this_thread();
  if (worker == nullptr) {
    if (advance_until([&] { return completed() >= sequence; })) return;
  } else if (s.virtual_clock.load(std::memory_order_acquire)) {
    // A worker waiting on another stream is quiet while that work is not
    // done; once it is, this stream's device runs on from the clock's time.
    {
      std::lock_guard<std::mutex> guard(worker->mutex_);
      worker->waiting_on_ = this;
      worker->waiting_for_ = sequence;
    }
    std::uint64_t ended_at = 0;
    {
      std::unique_lock<std::mutex> guard(s.progress_lock);
      s.progress.wait(guard, [&] { return completed() >= sequence; });
      ended_at = ended_at_locked(sequence);
    }
    {
      std::lock_guard<std::mutex> guard(worker->mutex_);
      worker->waiting_on_ = nullptr;
    }
    worker->device_ns_ = std::max(worker->device_ns_, ended_at);
    return;
  }
  std::unique_lock<std::mutex> guard(s.progress_lock);
  s.progress.wait(guard, [&] { return completed() >= sequence; });
}

void Stream::run() {
  State& s = state();  // leaked: safe to use until the process is gone
  worker_stream() = this;
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock<std::mutex> guard(mutex_);
      work_ready_.wait(guard, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left
      work = std::move(queue_.front());
      queue_.pop_front();
      // An item starts no earlier on the clock than it was queued.
      device_ns_ = std::max(device_ns_, enqueued_at_.front());
      enqueued_at_.pop_front();
      running_.store(true, std::memory_order_release);
    }
    room_.notify_all();
    work();
    work = nullptr;  // release what the work holds (streams, too) before it counts as done
    {
      std::lock_guard<std::mutex> guard(s.progress_lock);
      const std::uint64_t sequence = completed_.load(std::memory_order_relaxed) + 1;
      ended_at_[sequence % ended_at_.size()] = device_ns_;
      completed_.store(sequence, std::memory_order_release);
      s.completions.fetch_add(1, std::memory_order_release);
    }
    running_.store(false, std::memory_order_release);
    s.progress.notify_all();
  }
}

CUresult resolve_stream(CUstream handle, std::shared_ptr<Stream>* out) {
  State& s = state();
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    Context* context = current_context();
    if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    if (handle != CU_STREAM_PER_THREAD) {
      *out = context->legacy;
      return CUDA_SUCCESS;
    }
    // One per thread and context. The map goes at thread exit; the stream
    // stays registered in State, so no worker is joined then.
    thread_local std::unordered_map<Context*, std::shared_ptr<Stream>> per_thread;
    std::shared_ptr<Stream>& stream = per_thread[context];
    if (!stream) {
      stream = std::make_shared<Stream>(0, false, context);
      std::lock_guard<std::mutex> guard(s.lock);
      s.streams[stream.get()] = stream;
    }
    *out = stream;
    return CUDA_SUCCESS;
  }
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.streams.find(reinterpret_cast<Stream*>(handle));
  if (it == s.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

namespace {

Node* node_of(CUgraphNode handle) { return reinterpret_cast<Node*>(handle); }

// A graph a handle names: an ended capture's, or one a child-graph node
// owns. Locked.
Graph* find_graph(State& s, CUgraph handle) {
  auto* graph = reinterpret_cast<Graph*>(handle);
  if (s.graphs.count(graph) != 0 || s.child_graphs.count(graph) != 0) return graph;
  return nullptr;
}

// The child graphs `graph` owns, at any depth, are gone with it. Locked.
void forget_children(State& s, const Graph& graph) {
  for (const auto& node : graph.nodes) {
    if (!node->child) continue;
    forget_children(s, *node->child);
    s.child_graphs.erase(node->child.get());
  }
}

// A copy of `graph`'s nodes, as cuGraphAddChildGraphNode makes. Locked.
std::unique_ptr<Graph> clone_graph(State& s, const Graph& graph) {
  auto copy = std::make_unique<Graph>();
  for (const auto& node : graph.nodes) {
    auto n = std::make_unique<Node>();
    n->type = node->type;
    n->work = node->work;
    n->function = node->function;
    n->arguments = node->arguments;  // shared: argument_pointers point into it
    n->argument_pointers = node->argument_pointers;
    n->copy = node->copy;
    n->set = node->set;
    if (node->child) {
      n->child = clone_graph(s, *node->child);
      s.child_graphs.insert(n->child.get());
    }
    copy->nodes.push_back(std::move(n));
  }
  return copy;
}

void set_frontier(Stream& stream, std::vector<CUgraphNode> frontier) {
  stream.frontier = std::move(frontier);
  stream.edge_data.assign(stream.frontier.size(), CUgraphEdgeData{});
}

// Adds a node after the stream's frontier and makes it the frontier. Locked.
Node* add_node(Stream& stream) {
  auto node = std::make_unique<Node>();
  node->dependencies = stream.frontier;
  Node* raw = node.get();
  stream.capture->target()->nodes.push_back(std::move(node));
  set_frontier(stream, {reinterpret_cast<CUgraphNode>(raw)});
  return raw;
}

// Blocking streams of `context` in capture mode. Locked.
std::vector<std::shared_ptr<Capture>> blocking_captures(State& s, const Context* context) {
  std::vector<std::shared_ptr<Capture>> out;
  for (auto& [raw, stream] : s.streams) {
    if (stream->blocking() && stream->context() == context && stream->capture) out.push_back(stream->capture);
  }
  return out;
}

// The legacy stream of `context` is unusable while a blocking stream of the
// context captures: using it invalidates those captures. Locked.
bool invalidate_implicit(State& s, const Context* context) {
  auto captures = blocking_captures(s, context);
  for (auto& c : captures) c->invalidated = true;
  return !captures.empty();
}

// Memory of a discarded graph: what it both allocated and freed.
std::vector<std::uintptr_t> graph_memory(const Graph& graph) {
  std::vector<std::uintptr_t> out;
  for (std::uintptr_t p : graph.frees) {
    if (std::find(graph.allocations.begin(), graph.allocations.end(), p) != graph.allocations.end()) out.push_back(p);
  }
  return out;
}

void release_all(const std::vector<std::uintptr_t>& addresses) {
  for (std::uintptr_t p : addresses) (void)release_device_allocation(p);
}

// Ends `capture`: its streams leave capture mode. Returns its graph (null
// for one captured into the program's graph, which keeps the nodes). Locked.
std::unique_ptr<Graph> end_capture(State& s, const std::shared_ptr<Capture>& capture) {
  capture->ended = true;
  // A call that captured just before (cuMemAllocAsync adds to the graph
  // after its submission) must find no graph, not one the program may
  // destroy from now on.
  capture->into = nullptr;
  for (auto& weak : capture->streams) {
    if (auto stream = weak.lock(); stream && stream->capture == capture) {
      stream->capture.reset();
      set_frontier(*stream, {});
    }
  }
  std::erase(s.captures, capture);
  return std::move(capture->graph);
}

// True when every node on a forked stream's frontier precedes (or is) a
// node on the origin's frontier. Locked.
bool joined(const Capture& capture) {
  auto origin_it = std::find_if(capture.streams.begin(), capture.streams.end(), [&](const std::weak_ptr<Stream>& w) {
    auto stream = w.lock();
    return stream && stream.get() == capture.origin;
  });
  if (origin_it == capture.streams.end()) return true;
  std::unordered_set<const Node*> reached;
  std::vector<const Node*> todo;
  for (CUgraphNode n : origin_it->lock()->frontier) todo.push_back(node_of(n));
  while (!todo.empty()) {
    const Node* n = todo.back();
    todo.pop_back();
    if (!reached.insert(n).second) continue;
    for (CUgraphNode d : n->dependencies) todo.push_back(node_of(d));
  }
  for (auto& weak : capture.streams) {
    auto stream = weak.lock();
    if (!stream || stream.get() == capture.origin || stream->capture.get() != &capture) continue;
    for (CUgraphNode n : stream->frontier) {
      if (reached.count(node_of(n)) == 0) return false;
    }
  }
  return true;
}

// Whether `*mode` holds one of the three modes. Read as an integer: a C
// caller may pass any value, which is not a valid value of the C++ enum.
bool valid_mode(const CUstreamCaptureMode* mode) {
  int raw = -1;
  static_assert(sizeof raw == sizeof *mode);
  std::memcpy(&raw, mode, sizeof raw);
  return raw == CU_STREAM_CAPTURE_MODE_GLOBAL || raw == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ||
         raw == CU_STREAM_CAPTURE_MODE_RELAXED;
}

CUstreamCaptureMode& thread_capture_mode() {
  thread_local CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  return mode;
}

}  // namespace

Submitted submit(const std::shared_ptr<Stream>& stream, std::function<void()> work,
                 const std::function<void(Node&)>& on_capture) {
  State& s = state();
  Submitted out;
  // A full queue makes the host wait, before it takes the lock the stream's
  // work may need to drain it.
  if (work) stream->wait_for_room(s.queue_depth.load(std::memory_order_relaxed));
  // Held across the enqueue, so that the legacy stream and a blocking stream
  // submitted to at once never wait on each other.
  std::lock_guard<std::mutex> guard(s.lock);
  if (stream->capture) {
    if (stream->capture->invalidated) {
      out.result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      return out;
    }
    out.capture = stream->capture;
    out.node = add_node(*stream);
    out.node->work = std::move(work);  // captured: run only when its graph is launched
    if (out.node->work) out.node->type = CU_GRAPH_NODE_TYPE_HOST;
    if (on_capture) on_capture(*out.node);
    return out;
  }
  // Collect what this work must wait for, per the legacy-stream rules.
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> waits;
  auto wait_on = [&](const std::shared_ptr<Stream>& other) {
    const std::uint64_t sequence = other->enqueued();
    if (other->completed() < sequence) waits.emplace_back(other, sequence);
  };
  if (stream->legacy()) {
    if (invalidate_implicit(s, stream->context())) {
      out.result = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      return out;
    }
    for (auto& [raw, other] : s.streams) {
      if (other->blocking() && other->context() == stream->context()) wait_on(other);
    }
    for (auto& other : s.retiring) {
      if (other->blocking() && other->context() == stream->context()) wait_on(other);
    }
  } else if (stream->blocking()) {
    wait_on(stream->context()->legacy);
  }
  if (!work) return out;  // nothing to run: only the capture rules applied
  if (waits.empty()) {
    out.sequence = stream->enqueue(std::move(work));
  } else {
    out.sequence = stream->enqueue([waits = std::move(waits), work = std::move(work)] {
      for (const auto& [other, sequence] : waits) other->wait_for(sequence);
      work();
    });
  }
  return out;
}

CUresult check_unsafe_call() {
  const CUstreamCaptureMode mode = thread_capture_mode();
  if (mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  bool conflict = false;
  for (auto& c : s.captures) {
    const bool mine = c->thread == std::this_thread::get_id();
    // Own captures unless relaxed; in global mode, other threads' global ones.
    if ((mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
        (!mine && mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
      c->invalidated = true;
      conflict = true;
    }
  }
  return conflict ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult check_context_sync(Context* context) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  bool conflict = false;
  for (auto& c : s.captures) {
    if (c->context == context) {
      c->invalidated = true;
      conflict = true;
    }
  }
  return conflict ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

std::vector<std::shared_ptr<Stream>> streams_of(Context* context) {
  State& s = state();
  std::vector<std::shared_ptr<Stream>> all;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    for (auto& c : s.contexts) {
      if (context == nullptr || c.get() == context) all.push_back(c->legacy);
    }
    {
      std::lock_guard<std::mutex> contexts_guard(s.contexts_lock);
      for (auto& c : s.created_contexts) {
        if (context == nullptr || c.get() == context) all.push_back(c->legacy);
      }
    }
    for (auto& [raw, stream] : s.streams) {
      if (context == nullptr || stream->context() == context) all.push_back(stream);
    }
    for (auto& stream : s.retiring) {
      if (context == nullptr || stream->context() == context) all.push_back(stream);
    }
  }
  return all;
}

void synchronize_context(Context* context) {
  for (auto& stream : streams_of(context)) stream->synchronize();
}

void synchronize_all() { synchronize_context(nullptr); }

}  // namespace tidepool::sim

using namespace tidepool::sim;  // NOLINT(google-build-using-namespace): exported C entry points below

namespace {

Event* find_event(CUevent handle) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.events.find(reinterpret_cast<Event*>(handle));
  return it == s.events.end() ? nullptr : it->second.get();
}

// An event's state, read under the lock.
struct EventView {
  std::shared_ptr<Stream> stream;
  std::uint64_t sequence = 0;
  bool captured = false;  // last recorded in a capture still in progress
  [[nodiscard]] bool complete() const { return !stream || stream->completed() >= sequence; }
};

EventView view(const Event& e) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  EventView v;
  v.captured = e.capture && !e.capture->ended;
  if (!e.capture) {
    v.stream = e.stream;
    v.sequence = e.sequence;
  }
  return v;
}

CUresult stream_create(CUstream* out, unsigned flags) {
  if (out == nullptr || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) return CUDA_ERROR_INVALID_VALUE;
  Context* context = current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto stream = std::make_shared<Stream>(flags, false, context);
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  s.streams[stream.get()] = stream;
  *out = reinterpret_cast<CUstream>(stream.get());
  return CUDA_SUCCESS;
}

// The legacy stream as a barrier: itself and the blocking streams of its
// context, live or retiring, with what each has queued now. Locked.
std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> legacy_barrier(State& s, const Stream& legacy) {
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> out;
  out.emplace_back(legacy.context()->legacy, legacy.context()->legacy->enqueued());
  for (auto& [raw, other] : s.streams) {
    if (other->blocking() && other->context() == legacy.context()) out.emplace_back(other, other->enqueued());
  }
  for (auto& other : s.retiring) {
    if (other->blocking() && other->context() == legacy.context()) out.emplace_back(other, other->enqueued());
  }
  return out;
}

// Synchronising or querying a stream: refused while it captures (and the
// capture invalidated), or, for the legacy stream, while a blocking stream
// of its context captures. Otherwise the (stream, sequence) pairs it covers.
CUresult sync_targets(const std::shared_ptr<Stream>& stream,
                      std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>>* targets) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  if (stream->capture) {
    stream->capture->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (stream->legacy()) {
    if (invalidate_implicit(s, stream->context())) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    *targets = legacy_barrier(s, *stream);
  } else {
    targets->emplace_back(stream, stream->enqueued());
  }
  return CUDA_SUCCESS;
}

CUstreamCaptureStatus capture_status(const Stream& stream) {
  if (stream.forced_capture.load() != 0) return CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (!stream.capture) return CU_STREAM_CAPTURE_STATUS_NONE;
  return stream.capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

// Where a capture puts its nodes: a graph of its own, or (ToGraph) the
// program's graph after the given nodes of it.
struct CaptureInto {
  CUgraph graph = nullptr;
  const CUgraphNode* dependencies = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  std::size_t count = 0;
};

// `mode` by address: it is validated before it is read as the enum.
CUresult begin_capture(CUstream handle, const CUstreamCaptureMode* mode, const CaptureInto& into = {}) {
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  if (!valid_mode(mode)) return CUDA_ERROR_INVALID_VALUE;
  if (into.count > 0 && into.dependencies == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (stream->legacy()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the legacy stream cannot capture
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  Graph* target = nullptr;
  if (into.graph != nullptr) {
    // A graph of the program's own (not a child graph, which its node owns).
    auto found = s.graphs.find(reinterpret_cast<Graph*>(into.graph));
    if (found == s.graphs.end()) return CUDA_ERROR_INVALID_VALUE;
    target = found->second.get();
    for (std::size_t i = 0; i < into.count; ++i) {
      const bool in_graph = std::any_of(target->nodes.begin(), target->nodes.end(), [&](const auto& node) {
        return reinterpret_cast<CUgraphNode>(node.get()) == into.dependencies[i];
      });
      if (!in_graph) return CUDA_ERROR_INVALID_VALUE;  // not a node of that graph
    }
  }
  if (stream->capture) return CUDA_ERROR_ILLEGAL_STATE;  // already capturing
  auto capture = std::make_shared<Capture>();
  capture->id = ++s.next_capture_id;
  capture->mode = *mode;
  capture->thread = std::this_thread::get_id();
  capture->context = stream->context();
  capture->origin = stream.get();
  capture->streams.push_back(stream);
  if (target != nullptr) {
    capture->graph.reset();
    capture->into = target;
  }
  stream->capture = capture;
  set_frontier(*stream, std::vector<CUgraphNode>(into.dependencies, into.dependencies + into.count));
  if (into.edges != nullptr) stream->edge_data.assign(into.edges, into.edges + into.count);
  s.captures.push_back(std::move(capture));
  return CUDA_SUCCESS;
}

// Whether a capture still puts nodes into `graph`. Locked.
bool captured_into(const State& s, const Graph* graph) {
  return std::any_of(s.captures.begin(), s.captures.end(), [&](const auto& c) { return c->into == graph; });
}

CUresult capture_info(CUstream handle, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                      const CUgraphNode** dependencies, const CUgraphEdgeData** edge_data, std::size_t* count) {
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  if (status == nullptr || (edge_data != nullptr && dependencies == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  if (stream->legacy() && !blocking_captures(s, stream->context()).empty()) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  *status = capture_status(*stream);
  const bool active = stream->capture && !stream->capture->invalidated;
  if (id != nullptr) *id = active ? stream->capture->id : 0;
  if (graph != nullptr) *graph = active ? reinterpret_cast<CUgraph>(stream->capture->target()) : nullptr;
  if (dependencies != nullptr) *dependencies = active ? stream->frontier.data() : nullptr;
  if (edge_data != nullptr) *edge_data = active ? stream->edge_data.data() : nullptr;
  if (count != nullptr) *count = active ? stream->frontier.size() : 0;
  return CUDA_SUCCESS;
}

// cuStreamEndCapture: the capture's graph, or, for one begun with
// cuStreamBeginCaptureToGraph, the program's graph it added to, which keeps
// its nodes even when the capture failed.
CUresult end_capture_on(CUstream handle, CUgraph* graph) {
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::vector<std::uintptr_t> discarded;
  CUresult result = CUDA_SUCCESS;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    auto capture = stream->capture;
    if (!capture) return CUDA_ERROR_ILLEGAL_STATE;  // not capturing
    if (capture->origin != stream.get()) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    if (capture->mode != CU_STREAM_CAPTURE_MODE_RELAXED && capture->thread != std::this_thread::get_id()) {
      return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    }
    *graph = nullptr;
    Graph* into = capture->into;
    if (capture->invalidated) {
      result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else if (!joined(*capture)) {
      result = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    }
    std::unique_ptr<Graph> owned = end_capture(s, capture);
    if (result == CUDA_SUCCESS && into != nullptr) {
      *graph = reinterpret_cast<CUgraph>(into);
    } else if (result == CUDA_SUCCESS) {
      Graph* raw = owned.get();
      s.graphs[raw] = std::move(owned);
      *graph = reinterpret_cast<CUgraph>(raw);
    } else if (owned) {
      discarded = graph_memory(*owned);
    }
  }
  release_all(discarded);
  return result;
}

CUresult stream_get_ctx(CUstream handle, CUcontext* ctx) {
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = reinterpret_cast<CUcontext>(stream->context());
  return CUDA_SUCCESS;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  if (CUresult r = enter_initialized("cuStreamCreate"); r != CUDA_SUCCESS) return r;
  return stream_create(stream, flags);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int /*priority*/) {
  if (CUresult r = enter_initialized("cuStreamCreateWithPriority"); r != CUDA_SUCCESS) return r;
  return stream_create(stream, flags);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamDestroy(CUstream handle) {
  if (CUresult r = enter_initialized("cuStreamDestroy_v2"); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::shared_ptr<Stream> stream;
  std::vector<std::uintptr_t> discarded;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    auto it = s.streams.find(reinterpret_cast<Stream*>(handle));
    if (it == s.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    stream = it->second;
    s.streams.erase(it);
    // A capture loses the stream: its origin gone, it can never be ended,
    // so it is discarded; a forked stream gone invalidates it.
    if (auto capture = stream->capture) {
      if (capture->origin == stream.get()) {
        if (std::unique_ptr<Graph> owned = end_capture(s, capture)) discarded = graph_memory(*owned);
      } else {
        capture->invalidated = true;
        stream->capture.reset();
      }
    }
    // Like the driver, return at once: queued work still runs, and the
    // worker ends once it has. Streams retired earlier and now idle go.
    std::erase_if(s.retiring, [](const std::shared_ptr<Stream>& r) { return r->completed() >= r->enqueued(); });
    if (stream->completed() < stream->enqueued()) s.retiring.push_back(stream);
  }
  release_all(discarded);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamSynchronize(CUstream handle) {
  if (CUresult r = enter_initialized("cuStreamSynchronize"); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> targets;
  if (CUresult r = sync_targets(stream, &targets); r != CUDA_SUCCESS) return r;
  for (const auto& [target, sequence] : targets) target->wait_for(sequence);
  return after_faults(CUDA_SUCCESS);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamQuery(CUstream handle) {
  if (CUresult r = enter_initialized("cuStreamQuery"); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> targets;
  if (CUresult r = sync_targets(stream, &targets); r != CUDA_SUCCESS) return r;
  settle_streams();
  for (const auto& [target, sequence] : targets) {
    if (target->completed() < sequence) return CUDA_ERROR_NOT_READY;
  }
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamGetFlags(CUstream handle, unsigned int* flags) {
  if (CUresult r = enter_initialized("cuStreamGetFlags"); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = stream->flags();  // 0 for the legacy and per-thread streams
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamGetCtx(CUstream handle, CUcontext* ctx) {
  if (CUresult r = enter_initialized("cuStreamGetCtx"); r != CUDA_SUCCESS) return r;
  return stream_get_ctx(handle, ctx);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamGetCtx_v2(CUstream handle, CUcontext* ctx, CUgreenCtx* green) {
  if (CUresult r = enter_initialized("cuStreamGetCtx_v2"); r != CUDA_SUCCESS) return r;
  if (green == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = stream_get_ctx(handle, ctx); r != CUDA_SUCCESS) return r;
  *green = nullptr;  // the sim has no green contexts
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamWaitEvent(CUstream handle, CUevent event, unsigned int flags) {
  if (CUresult r = enter_initialized("cuStreamWaitEvent"); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  Event* e = find_event(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if ((flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::shared_ptr<Stream> source;
  std::uint64_t sequence = 0;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    std::shared_ptr<Capture> recorded_in = e->capture && !e->capture->ended ? e->capture : nullptr;
    if (auto capture = stream->capture) {
      if (capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      if ((flags & CU_EVENT_WAIT_EXTERNAL) != 0) {
        add_node(*stream);  // an external event wait node
        return CUDA_SUCCESS;
      }
      if (recorded_in == capture) {  // a join: the next node depends on the event's work too
        std::vector<CUgraphNode> frontier = stream->frontier;
        for (CUgraphNode n : e->frontier) {
          if (std::find(frontier.begin(), frontier.end(), n) == frontier.end()) frontier.push_back(n);
        }
        set_frontier(*stream, std::move(frontier));
        return CUDA_SUCCESS;
      }
      if (recorded_in) {
        capture->invalidated = true;
        recorded_in->invalidated = true;
        return CUDA_ERROR_STREAM_CAPTURE_MERGE;
      }
      if (e->stream) {
        capture->invalidated = true;
        return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;  // a dependency on uncaptured work
      }
      return CUDA_SUCCESS;  // never recorded: nothing to wait for
    }
    if ((flags & CU_EVENT_WAIT_EXTERNAL) != 0) return CUDA_ERROR_INVALID_VALUE;  // only valid in capture
    if (recorded_in) {
      if (stream->legacy()) {
        // The legacy stream cannot join a capture.
        if (invalidate_implicit(s, stream->context())) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        recorded_in->invalidated = true;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      }
      if (recorded_in->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      // Fork: the stream joins the capture, its next node after the event's work.
      stream->capture = recorded_in;
      set_frontier(*stream, e->frontier);
      recorded_in->streams.push_back(stream);
      return CUDA_SUCCESS;
    }
    source = e->stream;
    sequence = e->sequence;
  }
  if (!source) return submit(stream, {}).result;  // never recorded: nothing to wait for
  return submit(stream, [source, sequence] { source->wait_for(sequence); }).result;
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamIsCapturing(CUstream handle, CUstreamCaptureStatus* status) {
  if (CUresult r = enter_initialized("cuStreamIsCapturing"); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  // The legacy stream while a blocking stream captures: an implicit
  // dependency on the capture. Reported, not invalidated.
  if (stream->legacy() && !blocking_captures(s, stream->context()).empty()) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  *status = capture_status(*stream);
  return CUDA_SUCCESS;
}

// --- stream capture ---------------------------------------------------------------------------------

TIDEPOOL_SIM_EXPORT CUresult cuStreamBeginCapture(CUstream handle) {
  if (CUresult r = enter_initialized("cuStreamBeginCapture"); r != CUDA_SUCCESS) return r;
  const CUstreamCaptureMode global = CU_STREAM_CAPTURE_MODE_GLOBAL;
  return begin_capture(handle, &global);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamBeginCapture_v2(CUstream handle, CUstreamCaptureMode mode) {
  if (CUresult r = enter_initialized("cuStreamBeginCapture_v2"); r != CUDA_SUCCESS) return r;
  return begin_capture(handle, &mode);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream handle) {
  if (CUresult r = enter_initialized("cuStreamBeginCapture_ptsz"); r != CUDA_SUCCESS) return r;
  const CUstreamCaptureMode global = CU_STREAM_CAPTURE_MODE_GLOBAL;
  return begin_capture(handle == nullptr ? CU_STREAM_PER_THREAD : handle, &global);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream handle, CUstreamCaptureMode mode) {
  if (CUresult r = enter_initialized("cuStreamBeginCapture_v2_ptsz"); r != CUDA_SUCCESS) return r;
  return begin_capture(handle == nullptr ? CU_STREAM_PER_THREAD : handle, &mode);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream handle, CUgraph graph,
                                                         const CUgraphNode* dependencies, const CUgraphEdgeData* edges,
                                                         std::size_t count, CUstreamCaptureMode mode) {
  if (CUresult r = enter_initialized("cuStreamBeginCaptureToGraph"); r != CUDA_SUCCESS) return r;
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return begin_capture(handle, &mode, {graph, dependencies, edges, count});
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream handle, CUgraph graph,
                                                              const CUgraphNode* dependencies,
                                                              const CUgraphEdgeData* edges, std::size_t count,
                                                              CUstreamCaptureMode mode) {
  if (CUresult r = enter_initialized("cuStreamBeginCaptureToGraph_ptsz"); r != CUDA_SUCCESS) return r;
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return begin_capture(handle == nullptr ? CU_STREAM_PER_THREAD : handle, &mode, {graph, dependencies, edges, count});
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamEndCapture(CUstream handle, CUgraph* graph) {
  if (CUresult r = enter_initialized("cuStreamEndCapture"); r != CUDA_SUCCESS) return r;
  return end_capture_on(handle, graph);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream handle, CUgraph* graph) {
  if (CUresult r = enter_initialized("cuStreamEndCapture_ptsz"); r != CUDA_SUCCESS) return r;
  return end_capture_on(handle == nullptr ? CU_STREAM_PER_THREAD : handle, graph);
}

TIDEPOOL_SIM_EXPORT CUresult cuGraphCreate(CUgraph* graph, unsigned int flags) {
  if (CUresult r = enter_initialized("cuGraphCreate"); r != CUDA_SUCCESS) return r;
  if (graph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto made = std::make_unique<Graph>();
  Graph* raw = made.get();
  s.graphs[raw] = std::move(made);
  *graph = reinterpret_cast<CUgraph>(raw);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamGetCaptureInfo(CUstream handle, CUstreamCaptureStatus* status, cuuint64_t* id) {
  if (CUresult r = enter_initialized("cuStreamGetCaptureInfo"); r != CUDA_SUCCESS) return r;
  return capture_info(handle, status, id, nullptr, nullptr, nullptr, nullptr);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream handle, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                       CUgraph* graph, const CUgraphNode** dependencies,
                                                       std::size_t* count) {
  if (CUresult r = enter_initialized("cuStreamGetCaptureInfo_v2"); r != CUDA_SUCCESS) return r;
  return capture_info(handle, status, id, graph, dependencies, nullptr, count);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream handle, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                       CUgraph* graph, const CUgraphNode** dependencies,
                                                       const CUgraphEdgeData** edge_data, std::size_t* count) {
  if (CUresult r = enter_initialized("cuStreamGetCaptureInfo_v3"); r != CUDA_SUCCESS) return r;
  return capture_info(handle, status, id, graph, dependencies, edge_data, count);
}

TIDEPOOL_SIM_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (CUresult r = enter_initialized("cuThreadExchangeStreamCaptureMode"); r != CUDA_SUCCESS) return r;
  if (mode == nullptr || !valid_mode(mode)) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, thread_capture_mode());
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  if (CUresult r = enter_initialized("cuGraphDestroy"); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::unique_ptr<Graph> owned;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    auto it = s.graphs.find(reinterpret_cast<Graph*>(graph));
    if (it == s.graphs.end()) return CUDA_ERROR_INVALID_VALUE;
    // A capture still adding to it (cuStreamBeginCaptureToGraph) would
    // write into freed memory; the driver leaves this undefined.
    if (captured_into(s, it->first)) return CUDA_ERROR_ILLEGAL_STATE;
    owned = std::move(it->second);
    s.graphs.erase(it);
    forget_children(s, *owned);
  }
  release_all(graph_memory(*owned));
  return CUDA_SUCCESS;
}

// Graphs from a capture, run: instantiation keeps each node's work in
// capture order; a launch runs them all as one item of its stream (the
// nodes of one graph never overlap here, which a GPU may do).
TIDEPOOL_SIM_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  if (CUresult r = enter_initialized("cuGraphInstantiateWithFlags"); r != CUDA_SUCCESS) return r;
  if (exec == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  const Graph* found = find_graph(s, graph);
  if (found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto made = std::make_shared<GraphExec>();
  for (const auto& node : found->nodes) {
    if (node->work) made->work.push_back(node->work);
  }
  *exec = reinterpret_cast<CUgraphExec>(made.get());
  s.graph_execs.emplace(made.get(), made);
  return CUDA_SUCCESS;
}

namespace {

CUresult graph_launch(const char* name, CUgraphExec exec, CUstream handle) {
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  std::shared_ptr<GraphExec> graph;
  {
    State& s = state();
    std::lock_guard<std::mutex> guard(s.lock);
    auto it = s.graph_execs.find(reinterpret_cast<GraphExec*>(exec));
    if (it == s.graph_execs.end()) return CUDA_ERROR_INVALID_VALUE;
    graph = it->second;
  }
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  return submit(stream,
                [graph] {
                  for (const auto& work : graph->work) work();
                })
      .result;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return graph_launch("cuGraphLaunch", exec, stream);
}

TIDEPOOL_SIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return graph_launch("cuGraphLaunch_ptsz", exec, stream == nullptr ? CU_STREAM_PER_THREAD : stream);
}

// The graph's own work still queued keeps running: the stream holds it.
TIDEPOOL_SIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
  if (CUresult r = enter_initialized("cuGraphExecDestroy"); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  return s.graph_execs.erase(reinterpret_cast<GraphExec*>(exec)) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TIDEPOOL_SIM_EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, std::size_t* count) {
  if (CUresult r = enter_initialized("cuGraphGetNodes"); r != CUDA_SUCCESS) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  const Graph* found = find_graph(s, graph);
  if (found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto& all = found->nodes;
  if (nodes != nullptr) {
    for (std::size_t i = 0; i < std::min(*count, all.size()); ++i)
      nodes[i] = reinterpret_cast<CUgraphNode>(all[i].get());
  }
  *count = all.size();
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  if (CUresult r = enter_initialized("cuGraphNodeGetType"); r != CUDA_SUCCESS) return r;
  if (node == nullptr || type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(state().lock);
  *type = node_of(node)->type;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* params) {
  if (CUresult r = enter_initialized("cuGraphKernelNodeGetParams_v2"); r != CUDA_SUCCESS) return r;
  if (node == nullptr || params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(state().lock);
  Node* n = node_of(node);
  if (n->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  *params = CUDA_KERNEL_NODE_PARAMS{};
  params->func = n->function;
  params->gridDimX = params->gridDimY = params->gridDimZ = 1;
  params->blockDimX = params->blockDimY = params->blockDimZ = 1;
  params->kernelParams = n->argument_pointers.data();
  return CUDA_SUCCESS;
}

namespace {

// A copy or set node's parameters, as the node keeps them.
template <typename Params>
CUresult node_params(const char* name, CUgraphNode node, CUgraphNodeType type, Params Node::*field, Params* out) {
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  if (node == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(state().lock);
  const Node* n = node_of(node);
  if (n->type != type) return CUDA_ERROR_INVALID_VALUE;
  *out = n->*field;
  return CUDA_SUCCESS;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D* params) {
  return node_params("cuGraphMemcpyNodeGetParams", node, CU_GRAPH_NODE_TYPE_MEMCPY, &Node::copy, params);
}

TIDEPOOL_SIM_EXPORT CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* params) {
  return node_params("cuGraphMemsetNodeGetParams", node, CU_GRAPH_NODE_TYPE_MEMSET, &Node::set, params);
}

// The node runs a copy of `child` made now, its nodes in order; the copy
// is the node's (cuGraphChildGraphNodeGetGraph), gone with its graph.
TIDEPOOL_SIM_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                                                      std::size_t count, CUgraph child) {
  if (CUresult r = enter_initialized("cuGraphAddChildGraphNode"); r != CUDA_SUCCESS) return r;
  if (node == nullptr || (dependencies == nullptr && count > 0)) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  Graph* parent = find_graph(s, graph);
  const Graph* inner = find_graph(s, child);
  if (parent == nullptr || inner == nullptr || parent == inner) return CUDA_ERROR_INVALID_VALUE;
  auto made = std::make_unique<Node>();
  made->type = CU_GRAPH_NODE_TYPE_GRAPH;
  made->dependencies.assign(dependencies, dependencies + count);
  made->child = clone_graph(s, *inner);
  s.child_graphs.insert(made->child.get());
  std::vector<std::function<void()>> works;
  for (const auto& n : made->child->nodes) {
    if (n->work) works.push_back(n->work);
  }
  made->work = [works = std::move(works)] {
    for (const auto& work : works) work();
  };
  *node = reinterpret_cast<CUgraphNode>(made.get());
  parent->nodes.push_back(std::move(made));
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* graph) {
  if (CUresult r = enter_initialized("cuGraphChildGraphNodeGetGraph"); r != CUDA_SUCCESS) return r;
  if (node == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(state().lock);
  const Node* n = node_of(node);
  if (n->type != CU_GRAPH_NODE_TYPE_GRAPH || !n->child) return CUDA_ERROR_INVALID_VALUE;
  *graph = reinterpret_cast<CUgraph>(n->child.get());
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuLaunchHostFunc(CUstream handle, CUhostFn fn, void* user_data) {
  if (CUresult r = enter_initialized("cuLaunchHostFunc"); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return submit(stream, [fn, user_data] { fn(user_data); }).result;
}

// --- events --------------------------------------------------------------------------------------

TIDEPOOL_SIM_EXPORT CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  if (CUresult r = enter_initialized("cuEventCreate"); r != CUDA_SUCCESS) return r;
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto e = std::make_unique<Event>();
  e->flags = flags;
  e->context = context;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  *event = reinterpret_cast<CUevent>(e.get());
  s.events[e.get()] = std::move(e);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuEventDestroy(CUevent event) {
  if (CUresult r = enter_initialized("cuEventDestroy_v2"); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::unique_ptr<Event> owned;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    auto it = s.events.find(reinterpret_cast<Event*>(event));
    if (it == s.events.end()) return CUDA_ERROR_INVALID_HANDLE;
    owned = std::move(it->second);
    s.events.erase(it);
  }
  // Returns at once, as the driver does: the record's stream work holds
  // only the completion stamp, never the event.
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuEventRecord(CUevent event, CUstream handle) {
  if (CUresult r = enter_initialized("cuEventRecord"); r != CUDA_SUCCESS) return r;
  Event* e = find_event(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  // The event and the stream must be of one context, as the driver requires.
  if (e->context != stream->context()) return CUDA_ERROR_INVALID_HANDLE;
  State& s = state();
  {
    std::lock_guard<std::mutex> guard(s.lock);
    if (auto capture = stream->capture) {
      // Captured: the event now stands for the stream's captured work so far.
      if (capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      e->stream.reset();
      e->sequence = 0;
      e->capture = capture;
      e->frontier = stream->frontier;
      return CUDA_SUCCESS;
    }
  }
  const std::int64_t before = e->completed_at->exchange(0);
  Submitted sub = submit(stream, [stamp = e->completed_at] { stamp->store(now_ns()); });
  if (sub.result != CUDA_SUCCESS) {
    e->completed_at->store(before);
    return sub.result;
  }
  {
    std::lock_guard<std::mutex> guard(s.lock);
    if (sub.capture) {  // the stream began capturing meanwhile
      e->stream.reset();
      e->sequence = 0;
      e->capture = sub.capture;
      e->frontier = stream->frontier;
      return CUDA_SUCCESS;
    }
    e->stream = stream;
    e->sequence = sub.sequence;
    e->capture.reset();
    e->frontier.clear();
  }
  // With records_wait set, the record completes before the call returns
  // (see sim_control.h); the sim's lock is released first, as the stream's
  // worker needs it.
  if (s.records_wait.load(std::memory_order_relaxed)) stream->wait_for(sub.sequence);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuEventQuery(CUevent event) {
  if (CUresult r = enter_initialized("cuEventQuery"); r != CUDA_SUCCESS) return r;
  Event* e = find_event(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const EventView v = view(*e);
  if (v.captured) return CUDA_ERROR_CAPTURED_EVENT;
  settle_streams();
  return v.complete() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

TIDEPOOL_SIM_EXPORT CUresult cuEventSynchronize(CUevent event) {
  if (CUresult r = enter_initialized("cuEventSynchronize"); r != CUDA_SUCCESS) return r;
  Event* e = find_event(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const EventView v = view(*e);
  if (v.captured) return CUDA_ERROR_CAPTURED_EVENT;
  if (v.stream) v.stream->wait_for(v.sequence);
  return after_faults(CUDA_SUCCESS);
}

namespace {

CUresult elapsed_time(float* ms, CUevent start, CUevent end) {
  Event* a = find_event(start);
  Event* b = find_event(end);
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const EventView va = view(*a);
  const EventView vb = view(*b);
  if (va.captured || vb.captured) return CUDA_ERROR_CAPTURED_EVENT;
  if (!va.complete() || !vb.complete()) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>(b->completed_at->load() - a->completed_at->load()) / 1e6F;
  return CUDA_SUCCESS;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  if (CUresult r = enter_initialized("cuEventElapsedTime"); r != CUDA_SUCCESS) return r;
  return elapsed_time(ms, start, end);
}

TIDEPOOL_SIM_EXPORT CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (CUresult r = enter_initialized("cuEventElapsedTime_v2"); r != CUDA_SUCCESS) return r;
  return elapsed_time(ms, start, end);
}

// --- kernels --------------------------------------------------------------------------------------

namespace {

CUresult register_kernel(void** out, tidepool_sim_kernel_fn fn, void* user_data, std::size_t num_params,
                         const std::size_t* param_sizes, bool library) {
  if (out == nullptr || fn == nullptr || (num_params > 0 && param_sizes == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  auto k = std::make_unique<Kernel>();
  k->fn = fn;
  k->user_data = user_data;
  k->library = library;
  std::size_t offset = 0;
  for (std::size_t i = 0; i < num_params; ++i) {
    const std::size_t size = param_sizes[i];
    const std::size_t align = size >= 8 ? 8 : (size >= 4 ? 4 : (size >= 2 ? 2 : 1));
    offset = (offset + align - 1) / align * align;
    k->offsets.push_back(offset);
    k->sizes.push_back(size);
    offset += size;
  }
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  *out = k.get();
  s.kernels[k.get()] = std::move(k);
  return CUDA_SUCCESS;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult tidepool_sim_register_kernel(CUfunction* out, tidepool_sim_kernel_fn fn, void* user_data,
                                                          std::size_t num_params, const std::size_t* param_sizes) {
  void* handle = nullptr;
  const CUresult r = register_kernel(&handle, fn, user_data, num_params, param_sizes, false);
  if (r == CUDA_SUCCESS) *out = static_cast<CUfunction>(handle);
  return r;
}

TIDEPOOL_SIM_EXPORT CUresult tidepool_sim_register_library_kernel(CUkernel* out, tidepool_sim_kernel_fn fn,
                                                                  void* user_data, std::size_t num_params,
                                                                  const std::size_t* param_sizes) {
  void* handle = nullptr;
  const CUresult r = register_kernel(&handle, fn, user_data, num_params, param_sizes, true);
  if (r == CUDA_SUCCESS) *out = static_cast<CUkernel>(handle);
  return r;
}

namespace {

Kernel* find_kernel(CUfunction f) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.kernels.find(reinterpret_cast<Kernel*>(f));
  return it == s.kernels.end() ? nullptr : it->second.get();
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult tidepool_sim_set_kernel_extent(CUfunction f, std::size_t pointer_param,
                                                            std::size_t count_param, std::size_t element_bytes) {
  Kernel* k = find_kernel(f);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (pointer_param >= k->sizes.size() || count_param >= k->sizes.size() || k->sizes[pointer_param] != sizeof(void*) ||
      k->sizes[count_param] != sizeof(std::size_t)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> guard(state().lock);
  k->extent_pointer = pointer_param;
  k->extent_count = count_param;
  k->extent_element = element_bytes;
  k->has_extent = true;
  return CUDA_SUCCESS;
}

namespace {

CUresult param_info(const Kernel& k, std::size_t index, std::size_t* offset, std::size_t* size) {
  if (index >= k.sizes.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = k.offsets[index];
  if (size != nullptr) *size = k.sizes[index];
  return CUDA_SUCCESS;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, std::size_t index, std::size_t* offset,
                                                std::size_t* size) {
  if (CUresult r = enter_initialized("cuFuncGetParamInfo"); r != CUDA_SUCCESS) return r;
  Kernel* k = find_kernel(func);
  if (k == nullptr || k->library) return CUDA_ERROR_INVALID_HANDLE;  // a CUkernel is not a CUfunction
  return param_info(*k, index, offset, size);
}

TIDEPOOL_SIM_EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, std::size_t index, std::size_t* offset,
                                                  std::size_t* size) {
  if (CUresult r = enter_initialized("cuKernelGetParamInfo"); r != CUDA_SUCCESS) return r;
  Kernel* k = find_kernel(reinterpret_cast<CUfunction>(kernel));
  if (k == nullptr || !k->library) return CUDA_ERROR_INVALID_HANDLE;
  return param_info(*k, index, offset, size);
}

namespace {

// Whether a launch's arguments hold an address in host-located VMM memory:
// every 8-byte-aligned word of every parameter counts, so a pointer inside a
// struct argument does too. The kernel would read that memory over the bus.
std::vector<std::uint64_t> argument_words(const std::vector<std::vector<unsigned char>>& arguments) {
  std::vector<std::uint64_t> words;
  for (const auto& argument : arguments) {
    for (std::size_t at = 0; at + sizeof(std::uint64_t) <= argument.size(); at += sizeof(std::uint64_t)) {
      std::uint64_t word = 0;
      std::memcpy(&word, argument.data() + at, sizeof word);
      words.push_back(word);
    }
  }
  return words;
}

bool reaches_host_memory(const std::vector<std::uint64_t>& words) {
  if (state().host_mappings.load() == 0) return false;  // the common case: nothing to find
  return any_host_mapped(words.data(), words.size());
}

}  // namespace

Running::Running(const std::vector<State::Touch>& touches, const char* what) {
  State& s = state();
  {
    std::lock_guard<std::mutex> guard(s.running_lock);
    id_ = ++s.next_running;
    s.running.push_back({id_, touches, &hit_, what});
  }
  const std::uintptr_t unreachable = first_unreachable(touches);
  if (unreachable == 0) return;
  reachable_ = false;
  if (s.unmapped_faults.fetch_add(1) == 0) {
    std::fprintf(stderr,
                 "tidepool sim: a %s reached %#llx, reserved VA with nothing mapped there or without the access it "
                 "needs: on a GPU it faults (CUDA_ERROR_ILLEGAL_ADDRESS, sticky); the sim skips it\n",
                 what, static_cast<unsigned long long>(unreachable));
  }
}

Running::~Running() {
  State& s = state();
  {
    std::lock_guard<std::mutex> guard(s.running_lock);
    std::erase_if(s.running, [&](const State::RunningWork& r) { return r.id == id_; });
  }
  if (s.unsettled_ranges.load() > 0) settle_under_work();
}

namespace {

// What a running kernel may touch: one byte at each argument word (a
// guess), and the range its extent declares (tidepool_sim_set_kernel_extent),
// if any.
std::vector<State::Touch> kernel_touches(const Kernel& k, const std::vector<void*>& pointers,
                                         const std::vector<std::uint64_t>& words) {
  std::vector<State::Touch> touches;
  touches.reserve(words.size() + 1);
  for (const std::uint64_t w : words) {
    if (w != 0) touches.push_back({static_cast<std::uintptr_t>(w), static_cast<std::uintptr_t>(w) + 1, false, true});
  }
  if (k.has_extent && k.extent_pointer < pointers.size() && k.extent_count < pointers.size()) {
    std::uintptr_t base = 0;
    std::size_t count = 0;
    std::memcpy(&base, pointers[k.extent_pointer], sizeof base);
    std::memcpy(&count, pointers[k.extent_count], sizeof count);
    touches.push_back({base, base + count * k.extent_element});
  }
  return touches;
}

// The byte size of the kernel's packed parameter buffer: the end of its last
// parameter, each at its natural alignment.
std::size_t parameter_bytes(const Kernel& k) { return k.sizes.empty() ? 0 : k.offsets.back() + k.sizes.back(); }

// The `extra` form of a launch: a packed buffer (CU_LAUNCH_PARAM_BUFFER_POINTER)
// and a pointer to its size (CU_LAUNCH_PARAM_BUFFER_SIZE), up to
// CU_LAUNCH_PARAM_END. A size other than the kernel's parameter bytes is
// refused before a byte of the buffer is read, as is a size without a buffer.
CUresult copy_packed_arguments(const Kernel& k, void** extra, std::vector<std::vector<unsigned char>>* copies) {
  const void* buffer = nullptr;
  const std::size_t* size = nullptr;
  bool size_given = false;
  for (std::size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buffer = extra[i + 1];
    } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      size = static_cast<const std::size_t*>(extra[i + 1]);
      size_given = true;
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  const std::size_t expected = parameter_bytes(k);
  if (!size_given || size == nullptr) return expected == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (*size != expected || (expected > 0 && buffer == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  const auto* bytes = static_cast<const unsigned char*>(buffer);
  for (std::size_t i = 0; i < k.sizes.size(); ++i) {
    copies->emplace_back(bytes + k.offsets[i], bytes + k.offsets[i] + k.sizes[i]);
  }
  return CUDA_SUCCESS;
}

// cuLaunchKernel and its variants, once the fault check is passed.
CUresult launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       CUstream handle, void** params, void** extra) {
  if (current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Kernel* k = find_kernel(f);
  if (k == nullptr || k->unloaded.load()) return CUDA_ERROR_INVALID_HANDLE;
  if (gx * gy * gz == 0 || bx * by * bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;  // one form or the other
  if (!k->sizes.empty() && params == nullptr && extra == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Arguments are copied at launch, as the driver does.
  std::vector<std::vector<unsigned char>> copies;
  if (extra != nullptr) {
    if (CUresult r = copy_packed_arguments(*k, extra, &copies); r != CUDA_SUCCESS) return r;
  } else {
    for (std::size_t i = 0; i < k->sizes.size(); ++i) {
      const auto* bytes = static_cast<const unsigned char*>(params[i]);
      copies.emplace_back(bytes, bytes + k->sizes[i]);
    }
  }
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  auto arguments = std::make_shared<std::vector<std::vector<unsigned char>>>(std::move(copies));
  const int device = stream->context()->device;
  const std::array<unsigned, 3> grid{gx, gy, gz};
  const Submitted sub = submit(
      stream,
      [k, arguments, device, grid] {
        if (k->reference != nullptr) {
          std::vector<std::vector<unsigned char>> own = *arguments;
          std::vector<void*> pointers;
          pointers.reserve(own.size());
          for (auto& c : own) pointers.push_back(c.data());
          run_reference(*k->reference, pointers.data(), grid, device);
          return;
        }
        std::vector<std::uint64_t> words = argument_words(*arguments);
        // Judged when the kernel runs: what is mapped then is what it would read.
        if (reaches_host_memory(words)) state().host_resident_launches.fetch_add(1);
        // Each run gets its own copies: a graph launched twice runs it twice.
        std::vector<std::vector<unsigned char>> own = *arguments;
        std::vector<void*> pointers;
        pointers.reserve(own.size());
        for (auto& c : own) pointers.push_back(c.data());
        std::vector<State::Touch> touches = kernel_touches(*k, pointers, words);
        // Judged when it runs too: access granted or taken while it was queued counts.
        if (!device_may_touch(device, touches)) return;
        const Running running(touches, "kernel");
        if (running.reachable()) k->fn(pointers.data(), k->user_data);
      },
      [f, arguments](Node& node) {
        node.type = CU_GRAPH_NODE_TYPE_KERNEL;
        node.function = f;
        node.arguments = arguments;
        for (auto& c : *arguments) node.argument_pointers.push_back(c.data());
      });
  return sub.result;
}

CUresult launch_kernel_ex(const CUlaunchConfig* config, CUfunction f, void** params, void** extra, bool per_thread) {
  // The attributes change nothing the sim models, but must be readable.
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  CUstream handle = config->hStream;
  if (per_thread && handle == nullptr) handle = CU_STREAM_PER_THREAD;
  return launch_kernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                       config->blockDimZ, handle, params, extra);
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                            unsigned by, unsigned bz, unsigned /*shared_bytes*/, CUstream handle,
                                            void** params, void** extra) {
  if (CUresult r = enter_initialized("cuLaunchKernel"); r != CUDA_SUCCESS) return r;
  return launch_kernel(f, gx, gy, gz, bx, by, bz, handle, params, extra);
}

TIDEPOOL_SIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                 unsigned by, unsigned bz, unsigned /*shared_bytes*/, CUstream handle,
                                                 void** params, void** extra) {
  if (CUresult r = enter_initialized("cuLaunchKernel_ptsz"); r != CUDA_SUCCESS) return r;
  return launch_kernel(f, gx, gy, gz, bx, by, bz, handle == nullptr ? CU_STREAM_PER_THREAD : handle, params, extra);
}

TIDEPOOL_SIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (CUresult r = enter_initialized("cuLaunchKernelEx"); r != CUDA_SUCCESS) return r;
  return launch_kernel_ex(config, f, params, extra, false);
}

TIDEPOOL_SIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                                   void** extra) {
  if (CUresult r = enter_initialized("cuLaunchKernelEx_ptsz"); r != CUDA_SUCCESS) return r;
  return launch_kernel_ex(config, f, params, extra, true);
}

// --- copies and sets ---------------------------------------------------------------------------------

namespace {

// A copy across the host-device link: which way, and how long it takes.
struct Link {
  std::atomic<std::uint64_t>* counter = nullptr;  // null: host-to-host or device-to-device
  double gbps = 0;                                // 0: unlimited
};

// `from_host`: the source's side, when the caller knows it (a staged copy's
// source is host memory, whatever the program did with its own buffer since).
Link link_of(const void* dst, const void* src, int from_host_known = -1) {
  State& s = state();
  const bool from_host =
      from_host_known >= 0 ? from_host_known != 0 : host_located(reinterpret_cast<std::uintptr_t>(src));
  const bool to_host = host_located(reinterpret_cast<std::uintptr_t>(dst));
  if (from_host == to_host) return {};
  return Link{from_host ? &s.copied_to_device : &s.copied_to_host, s.copy_gbps.load()};
}

// Runs on the stream's worker and sleeps there, never under the sim's lock:
// a slow copy holds up its own stream only. Each stream's copies get the
// whole bandwidth; concurrent copies do not share the link.
void copy(void* dst, const void* src, std::size_t n, Link link) {
  const auto to = reinterpret_cast<std::uintptr_t>(dst);
  const auto from = reinterpret_cast<std::uintptr_t>(src);
  const Running running({{to, to + n, true}, {from, from + n, false}}, "copy");
  if (!running.reachable()) return;
  if (link.counter != nullptr) link.counter->fetch_add(n);
  if (link.counter == nullptr || link.gbps <= 0) {
    std::memmove(dst, src, n);
    return;
  }
  // bytes / (gbps * 1e9 bytes/s), in nanoseconds; a century at most, so that
  // an absurd bandwidth cannot overflow the clock. The bytes land over that
  // time, a slice at a time, as a GPU's do: a reader that is not ordered
  // after the copy sees some of the old bytes, a writer has some of its own
  // overwritten. (Overlapping copies within one buffer are not slowed.)
  constexpr double kLongest = 3.2e18;
  const std::int64_t start = now_ns();
  const auto duration = static_cast<std::int64_t>(std::min(static_cast<double>(n) / link.gbps, kLongest));
  constexpr std::size_t kSlices = 8;
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  for (std::size_t i = 0; i < kSlices; ++i) {
    const std::int64_t due =
        start + static_cast<std::int64_t>(static_cast<double>(duration) * static_cast<double>(i + 1) / kSlices);
    if (const std::int64_t left = due - now_ns(); left > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(left));
    if (running.hit().load()) return;  // faulted: the rest never lands
    const std::size_t begin = n * i / kSlices;
    std::memmove(out + begin, in + begin, n * (i + 1) / kSlices - begin);
  }
}

// A copy or set node of `n` bytes counts, when it runs, whether it touches
// VA mapped to host memory anywhere in its range
// (tidepool_sim_host_resident_graph_copies). `src`: null for a set.
void count_host_reach(Node& node, const void* dst, const void* src, std::size_t n) {
  node.work = [work = std::move(node.work), dst, src, n] {
    if (host_mapped_in(reinterpret_cast<std::uintptr_t>(dst), n) ||
        (src != nullptr && host_mapped_in(reinterpret_cast<std::uintptr_t>(src), n))) {
      state().host_resident_graph_copies.fetch_add(1);
    }
    work();
  };
}

void* ptr(CUdeviceptr p) { return reinterpret_cast<void*>(p); }

}  // namespace

// Pageable host memory, as the driver treats it: an asynchronous copy to it
// returns only once the copy is done, and one from it only once the source
// has been read (the driver stages it), so the program may reuse or free
// the memory as soon as the call returns. A copy that read its source later
// on the stream's worker would race with that.
// `read_now`: the source is read before the call returns, whatever memory
// it is (a batch copy's CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL).
CUresult tidepool::sim::queue_copy(const std::shared_ptr<Stream>& stream, void* dst, const void* src, std::size_t n,
                                   bool wait, bool read_now) {
  const bool to_pageable = n > 0 && pageable(reinterpret_cast<std::uintptr_t>(dst));
  const bool from_pageable = n > 0 && pageable(reinterpret_cast<std::uintptr_t>(src));
  wait = wait || to_pageable;
  // Captured: a memcpy node, each side host or device memory as the driver
  // reports it.
  const auto as_node = [dst, src, n, to_pageable, from_pageable](Node& node) {
    node.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    CUDA_MEMCPY3D& c = node.copy;
    c = CUDA_MEMCPY3D{};
    c.srcMemoryType = from_pageable ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c.srcHost = from_pageable ? src : nullptr;
    c.srcDevice = from_pageable ? 0 : reinterpret_cast<CUdeviceptr>(src);
    c.dstMemoryType = to_pageable ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c.dstHost = to_pageable ? dst : nullptr;
    c.dstDevice = to_pageable ? 0 : reinterpret_cast<CUdeviceptr>(dst);
    c.WidthInBytes = n;
    c.Height = 1;
    c.Depth = 1;
    count_host_reach(node, dst, src, n);
  };
  Submitted sub;
  const auto reached = stream->host_resident_copies;
  if ((from_pageable || (read_now && n > 0)) && !wait) {
    const auto* bytes = static_cast<const unsigned char*>(src);
    std::shared_ptr<const std::vector<unsigned char>> staged;
    if (from_pageable) {
      staged = std::make_shared<const std::vector<unsigned char>>(bytes, bytes + n);
    } else {
      // Memory the device reads, read by the driver during the call: where
      // nothing is mapped, that read faults as a GPU's would. The driver
      // documents no answer for it; the sim's choice is that the call says
      // so and this copy is not queued.
      const auto from = reinterpret_cast<std::uintptr_t>(src);
      const Running reading({{from, from + n, false}}, "copy's read during the call");
      if (!reading.reachable()) return CUDA_ERROR_ILLEGAL_ADDRESS;
      staged = std::make_shared<const std::vector<unsigned char>>(bytes, bytes + n);
      if (reading.hit().load()) return CUDA_ERROR_ILLEGAL_ADDRESS;  // unmapped while read
    }
    const bool source_on_host = host_mapped_in(reinterpret_cast<std::uintptr_t>(src), n);
    // The source was read into host memory now; only the destination's side
    // is decided when the copy runs.
    sub = submit(
        stream,
        [dst, staged, n, reached, source_on_host] {
          if (source_on_host || host_mapped_in(reinterpret_cast<std::uintptr_t>(dst), n)) reached->fetch_add(1);
          copy(dst, staged->data(), n, link_of(dst, nullptr, 1));
        },
        as_node);
  } else {
    sub = submit(
        stream,
        [dst, src, n, reached] {
          if (host_mapped_in(reinterpret_cast<std::uintptr_t>(dst), n) ||
              host_mapped_in(reinterpret_cast<std::uintptr_t>(src), n)) {
            reached->fetch_add(1);
          }
          copy(dst, src, n, n > 0 ? link_of(dst, src) : Link{});
        },
        as_node);
  }
  if (sub.result == CUDA_SUCCESS && wait && !sub.capture) stream->wait_for(sub.sequence);
  return sub.result;
}

CUresult tidepool::sim::synchronous_copy(const std::shared_ptr<Stream>& stream, void* dst, const void* src,
                                         std::size_t n) {
  const auto to = reinterpret_cast<std::uintptr_t>(dst);
  const auto from = reinterpret_cast<std::uintptr_t>(src);
  if (host_memory(to)) return queue_copy(stream, dst, src, n, true, false);
  if (n > 0 && pageable(from)) {
    // The stream is synchronised before the copy begins: an empty item
    // queued first carries the legacy stream's order after the blocking
    // streams, and is refused as the copy would be during a capture.
    const Submitted before = submit(stream, [] {});
    if (before.result != CUDA_SUCCESS) return before.result;
    if (!before.capture) stream->wait_for(before.sequence);
    return queue_copy(stream, dst, src, n, false, true);
  }
  return queue_copy(stream, dst, src, n, host_memory(from), false);
}

namespace {

// `synchronous`: the host waits as synchronous_copy says; else not at all
// (but for pageable memory, as queue_copy says).
CUresult copy_async(const char* name, void* dst, const void* src, std::size_t n, CUstream handle, bool synchronous) {
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  if ((dst == nullptr || src == nullptr) && n > 0) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  return synchronous ? synchronous_copy(stream, dst, src, n) : queue_copy(stream, dst, src, n, false, false);
}

// Whether a batch's attributes are as the driver requires: the first
// applies from copy 0, each later one from a later copy, all within `count`,
// and each names a source access order.
bool batch_attributes_valid(std::size_t count, const CUmemcpyAttributes* attrs, const std::size_t* idxs,
                            std::size_t num_attrs) {
  if (attrs == nullptr || idxs == nullptr || num_attrs == 0 || num_attrs > count || idxs[0] != 0) return false;
  for (std::size_t k = 0; k < num_attrs; ++k) {
    if (k > 0 && idxs[k] <= idxs[k - 1]) return false;
    if (idxs[k] >= count) return false;
    const CUmemcpySrcAccessOrder order = attrs[k].srcAccessOrder;
    if (order != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM && order != CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
        order != CU_MEMCPY_SRC_ACCESS_ORDER_ANY) {
      return false;
    }
  }
  return true;
}

// cuMemcpyBatchAsync: pointer-to-pointer copies on a stream other than the
// legacy one, queued in the order given (the driver promises no order among
// them, so a program may not rely on this one). `fail_index` (v1 only):
// the copy that failed, or SIZE_MAX when the batch failed as a whole or not
// at all.
CUresult copy_batch(const char* name, CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes, std::size_t count,
                    CUmemcpyAttributes* attrs, std::size_t* idxs, std::size_t num_attrs, std::size_t* fail_index,
                    CUstream handle) {
  if (fail_index != nullptr) *fail_index = SIZE_MAX;
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  if (handle == nullptr || handle == CU_STREAM_LEGACY) return CUDA_ERROR_INVALID_VALUE;
  if (count == 0 || dsts == nullptr || srcs == nullptr || sizes == nullptr ||
      !batch_attributes_valid(count, attrs, idxs, num_attrs)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  for (std::size_t i = 0; i < count; ++i) {
    if (sizes[i] > 0 && (dsts[i] == 0 || srcs[i] == 0)) {
      if (fail_index != nullptr) *fail_index = i;
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  std::size_t attribute = 0;
  for (std::size_t i = 0; i < count; ++i) {
    while (attribute + 1 < num_attrs && idxs[attribute + 1] <= i) ++attribute;
    const bool read_now = attrs[attribute].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
    if (CUresult r = queue_copy(stream, ptr(dsts[i]), ptr(srcs[i]), sizes[i], false, read_now); r != CUDA_SUCCESS) {
      if (fail_index != nullptr) *fail_index = i;
      return r;
    }
  }
  return CUDA_SUCCESS;
}

CUresult set_async(const char* name, void* dst, unsigned char value, std::size_t n, CUstream handle, bool wait) {
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  if (dst == nullptr && n > 0) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  const Submitted sub = submit(
      stream,
      [dst, value, n, reached = stream->host_resident_copies] {
        if (host_mapped_in(reinterpret_cast<std::uintptr_t>(dst), n)) reached->fetch_add(1);
        const auto to = reinterpret_cast<std::uintptr_t>(dst);
        const Running running({{to, to + n, true}}, "set");
        if (running.reachable()) std::memset(dst, value, n);
      },
      [dst, value, n](Node& node) {
        node.type = CU_GRAPH_NODE_TYPE_MEMSET;
        node.set = CUDA_MEMSET_NODE_PARAMS{};
        node.set.dst = reinterpret_cast<CUdeviceptr>(dst);
        node.set.value = value;
        node.set.elementSize = 1;
        node.set.width = n;
        node.set.height = 1;
        count_host_reach(node, dst, nullptr, n);
      });
  // A synchronous set returns at once but on pinned or managed memory, as
  // the driver documents.
  if (sub.result == CUDA_SUCCESS && wait && !sub.capture && host_memory(reinterpret_cast<std::uintptr_t>(dst))) {
    stream->wait_for(sub.sequence);
  }
  return sub.result;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, std::size_t n) {
  return copy_async("cuMemcpy", ptr(dst), ptr(src), n, nullptr, true);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, std::size_t n, CUstream s) {
  return copy_async("cuMemcpyAsync", ptr(dst), ptr(src), n, s, false);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemcpyHtoD(CUdeviceptr dst, const void* src, std::size_t n) {
  return copy_async("cuMemcpyHtoD_v2", ptr(dst), src, n, nullptr, true);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemcpyDtoH(void* dst, CUdeviceptr src, std::size_t n) {
  return copy_async("cuMemcpyDtoH_v2", dst, ptr(src), n, nullptr, true);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, std::size_t n) {
  return copy_async("cuMemcpyDtoD_v2", ptr(dst), ptr(src), n, nullptr, true);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, std::size_t n, CUstream s) {
  return copy_async("cuMemcpyHtoDAsync_v2", ptr(dst), src, n, s, false);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, std::size_t n, CUstream s) {
  return copy_async("cuMemcpyDtoHAsync_v2", dst, ptr(src), n, s, false);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, std::size_t n, CUstream s) {
  return copy_async("cuMemcpyDtoDAsync_v2", ptr(dst), ptr(src), n, s, false);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemsetD8(CUdeviceptr dst, unsigned char value, std::size_t n) {
  return set_async("cuMemsetD8_v2", ptr(dst), value, n, nullptr, true);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, std::size_t n, CUstream s) {
  return set_async("cuMemsetD8Async", ptr(dst), value, n, s, false);
}

TIDEPOOL_SIM_EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes,
                                                   std::size_t count, CUmemcpyAttributes* attrs,
                                                   std::size_t* attrs_idxs, std::size_t num_attrs, CUstream s) {
  return copy_batch("cuMemcpyBatchAsync_v2", dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, nullptr, s);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes,
                                                        std::size_t count, CUmemcpyAttributes* attrs,
                                                        std::size_t* attrs_idxs, std::size_t num_attrs, CUstream s) {
  return copy_batch("cuMemcpyBatchAsync_v2_ptsz", dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, nullptr,
                    s == nullptr ? CU_STREAM_PER_THREAD : s);
}
TIDEPOOL_SIM_EXPORT CUresult tidepool_sim_cuMemcpyBatchAsync_v1(CUdeviceptr* dsts, CUdeviceptr* srcs,
                                                                std::size_t* sizes, std::size_t count,
                                                                CUmemcpyAttributes* attrs, std::size_t* attrs_idxs,
                                                                std::size_t num_attrs, std::size_t* fail_idx,
                                                                CUstream s) {
  return copy_batch("cuMemcpyBatchAsync", dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, fail_idx, s);
}
TIDEPOOL_SIM_EXPORT CUresult tidepool_sim_cuMemcpyBatchAsync_v1_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs,
                                                                     std::size_t* sizes, std::size_t count,
                                                                     CUmemcpyAttributes* attrs, std::size_t* attrs_idxs,
                                                                     std::size_t num_attrs, std::size_t* fail_idx,
                                                                     CUstream s) {
  return copy_batch("cuMemcpyBatchAsync_ptsz", dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, fail_idx,
                    s == nullptr ? CU_STREAM_PER_THREAD : s);
}

TIDEPOOL_SIM_EXPORT void tidepool_sim_set_capturing(CUstream handle, int capturing) {
  std::shared_ptr<Stream> stream;
  if (resolve_stream(handle, &stream) == CUDA_SUCCESS) stream->forced_capture.store(capturing);
}
