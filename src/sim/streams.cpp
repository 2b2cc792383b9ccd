// Streams, events, kernels and copies. Each stream runs its work in order on
// a worker thread of its own, asynchronously to the caller, so a missing
// event or synchronisation in the code under test shows up as a wrong result.
//
// Legacy default stream (null / CU_STREAM_LEGACY): work on it waits for all
// work queued before it on blocking streams, and later work on blocking
// streams waits for it. CU_STREAM_NON_BLOCKING streams are exempt.
// CU_STREAM_PER_THREAD names a blocking stream of the calling thread.
#include <cstring>

#include "sim/sim.hpp"

namespace tidepool::sim {

namespace {

// Signalled whenever any stream finishes an item; waiters re-check.
std::mutex progress_lock;
std::condition_variable progress;

}  // namespace

Stream::Stream(unsigned flags, bool legacy) : flags_(flags), legacy_(legacy), worker_([this] { run(); }) {}

Stream::~Stream() { stop(); }

void Stream::stop() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  work_ready_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::uint64_t Stream::enqueue(std::function<void()> work) {
  std::lock_guard<std::mutex> guard(mutex_);
  queue_.push_back(std::move(work));
  const std::uint64_t sequence = ++enqueued_;
  work_ready_.notify_one();
  return sequence;
}

std::uint64_t Stream::enqueued() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return enqueued_;
}

void Stream::wait_for(std::uint64_t sequence) const {
  std::unique_lock<std::mutex> guard(progress_lock);
  progress.wait(guard, [&] { return completed() >= sequence; });
}

void Stream::run() {
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock<std::mutex> guard(mutex_);
      work_ready_.wait(guard, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    work();
    {
      std::lock_guard<std::mutex> guard(progress_lock);
      completed_.fetch_add(1, std::memory_order_release);
    }
    progress.notify_all();
  }
}

std::shared_ptr<Stream> resolve_stream(CUstream handle) {
  State& s = state();
  if (handle == nullptr || handle == CU_STREAM_LEGACY) return s.legacy;
  if (handle == CU_STREAM_PER_THREAD) {
    thread_local std::shared_ptr<Stream> per_thread;
    if (!per_thread) {
      per_thread = std::make_shared<Stream>(0, false);
      std::lock_guard<std::mutex> guard(s.lock);
      s.streams[per_thread.get()] = per_thread;
    }
    return per_thread;
  }
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.streams.find(reinterpret_cast<Stream*>(handle));
  return it == s.streams.end() ? nullptr : it->second;
}

std::uint64_t submit(const std::shared_ptr<Stream>& stream, std::function<void()> work) {
  State& s = state();
  // Collect what this work must wait for, per the legacy-stream rules.
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> waits;
  if (stream->legacy()) {
    std::lock_guard<std::mutex> guard(s.lock);
    for (auto& [raw, other] : s.streams) {
      if (other->blocking()) waits.emplace_back(other, other->enqueued());
    }
  } else if (stream->blocking()) {
    waits.emplace_back(s.legacy, s.legacy->enqueued());
  }
  if (waits.empty()) return stream->enqueue(std::move(work));
  return stream->enqueue([waits = std::move(waits), work = std::move(work)] {
    for (const auto& [other, sequence] : waits) other->wait_for(sequence);
    work();
  });
}

void synchronize_all() {
  State& s = state();
  std::vector<std::shared_ptr<Stream>> all{s.legacy};
  {
    std::lock_guard<std::mutex> guard(s.lock);
    for (auto& [raw, stream] : s.streams) all.push_back(stream);
    all.insert(all.end(), s.retiring.begin(), s.retiring.end());
  }
  for (auto& stream : all) stream->synchronize();
}

}  // namespace tidepool::sim

using namespace tidepool::sim;  // NOLINT(google-build-using-namespace): exported C entry points below

namespace {

Event* find_event(CUevent handle) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.events.find(reinterpret_cast<Event*>(handle));
  return it == s.events.end() ? nullptr : it->second.get();
}

bool event_complete(const Event& e) { return !e.stream || e.stream->completed() >= e.sequence; }

CUresult stream_create(CUstream* out, unsigned flags) {
  if (out == nullptr || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) return CUDA_ERROR_INVALID_VALUE;
  auto stream = std::make_shared<Stream>(flags, false);
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  s.streams[stream.get()] = stream;
  *out = reinterpret_cast<CUstream>(stream.get());
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
  {
    std::lock_guard<std::mutex> guard(s.lock);
    auto it = s.streams.find(reinterpret_cast<Stream*>(handle));
    if (it == s.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    stream = it->second;
    s.streams.erase(it);
    // Like the driver, return at once: queued work still runs, and the
    // worker ends once it has. Streams retired earlier and now idle go.
    std::erase_if(s.retiring, [](const std::shared_ptr<Stream>& r) { return r->completed() >= r->enqueued(); });
    if (stream->completed() < stream->enqueued()) s.retiring.push_back(stream);
  }
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamSynchronize(CUstream handle) {
  if (CUresult r = enter_initialized("cuStreamSynchronize"); r != CUDA_SUCCESS) return r;
  auto stream = resolve_stream(handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->legacy()) {
    synchronize_all();  // the legacy stream's work waits for every blocking stream's
  } else {
    stream->synchronize();
  }
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamQuery(CUstream handle) {
  if (CUresult r = enter_initialized("cuStreamQuery"); r != CUDA_SUCCESS) return r;
  auto stream = resolve_stream(handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  return stream->completed() >= stream->enqueued() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamWaitEvent(CUstream handle, CUevent event, unsigned int flags) {
  if (CUresult r = enter_initialized("cuStreamWaitEvent"); r != CUDA_SUCCESS) return r;
  auto stream = resolve_stream(handle);
  Event* e = find_event(event);
  if (!stream || e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> source = e->stream;
  const std::uint64_t sequence = e->sequence;
  if (!source) return CUDA_SUCCESS;  // never recorded: nothing to wait for
  submit(stream, [source, sequence] { source->wait_for(sequence); });
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamIsCapturing(CUstream handle, CUstreamCaptureStatus* status) {
  if (CUresult r = enter_initialized("cuStreamIsCapturing"); r != CUDA_SUCCESS) return r;
  auto stream = resolve_stream(handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *status = stream->capturing.load() != 0 ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuLaunchHostFunc(CUstream handle, CUhostFn fn, void* user_data) {
  if (CUresult r = enter_initialized("cuLaunchHostFunc"); r != CUDA_SUCCESS) return r;
  auto stream = resolve_stream(handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  submit(stream, [fn, user_data] { fn(user_data); });
  return CUDA_SUCCESS;
}

// --- events --------------------------------------------------------------------------------------

TIDEPOOL_SIM_EXPORT CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  if (CUresult r = enter_initialized("cuEventCreate"); r != CUDA_SUCCESS) return r;
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto e = std::make_unique<Event>();
  e->flags = flags;
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
  // Work that will stamp the event still holds it; let it finish first.
  if (owned->stream) owned->stream->wait_for(owned->sequence);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuEventRecord(CUevent event, CUstream handle) {
  if (CUresult r = enter_initialized("cuEventRecord"); r != CUDA_SUCCESS) return r;
  Event* e = find_event(event);
  auto stream = resolve_stream(handle);
  if (e == nullptr || !stream) return CUDA_ERROR_INVALID_HANDLE;
  e->completed_at_ns.store(0);
  const std::uint64_t sequence = submit(stream, [e] { e->completed_at_ns.store(now_ns()); });
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  e->stream = stream;
  e->sequence = sequence;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuEventQuery(CUevent event) {
  if (CUresult r = enter_initialized("cuEventQuery"); r != CUDA_SUCCESS) return r;
  Event* e = find_event(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return event_complete(*e) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

TIDEPOOL_SIM_EXPORT CUresult cuEventSynchronize(CUevent event) {
  if (CUresult r = enter_initialized("cuEventSynchronize"); r != CUDA_SUCCESS) return r;
  Event* e = find_event(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (e->stream) e->stream->wait_for(e->sequence);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  if (CUresult r = enter_initialized("cuEventElapsedTime"); r != CUDA_SUCCESS) return r;
  Event* a = find_event(start);
  Event* b = find_event(end);
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!event_complete(*a) || !event_complete(*b)) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>(b->completed_at_ns.load() - a->completed_at_ns.load()) / 1e6F;
  return CUDA_SUCCESS;
}

// --- kernels --------------------------------------------------------------------------------------

TIDEPOOL_SIM_EXPORT CUresult tidepool_sim_register_kernel(CUfunction* out, tidepool_sim_kernel_fn fn, void* user_data,
                                                          std::size_t num_params, const std::size_t* param_sizes) {
  if (out == nullptr || fn == nullptr || (num_params > 0 && param_sizes == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  auto k = std::make_unique<Kernel>();
  k->fn = fn;
  k->user_data = user_data;
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
  *out = reinterpret_cast<CUfunction>(k.get());
  s.kernels[k.get()] = std::move(k);
  return CUDA_SUCCESS;
}

namespace {

Kernel* find_kernel(CUfunction f) {
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.kernels.find(reinterpret_cast<Kernel*>(f));
  return it == s.kernels.end() ? nullptr : it->second.get();
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, std::size_t index, std::size_t* offset,
                                                std::size_t* size) {
  if (CUresult r = enter_initialized("cuFuncGetParamInfo"); r != CUDA_SUCCESS) return r;
  Kernel* k = find_kernel(func);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (index >= k->sizes.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = k->offsets[index];
  if (size != nullptr) *size = k->sizes[index];
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                            unsigned by, unsigned bz, unsigned /*shared_bytes*/, CUstream handle,
                                            void** params, void** extra) {
  if (CUresult r = enter_initialized("cuLaunchKernel"); r != CUDA_SUCCESS) return r;
  if (current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Kernel* k = find_kernel(f);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (gx * gy * gz == 0 || bx * by * bz == 0 || extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!k->sizes.empty() && params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto stream = resolve_stream(handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  // Arguments are copied at launch, as the driver does.
  std::vector<std::vector<unsigned char>> copies;
  for (std::size_t i = 0; i < k->sizes.size(); ++i) {
    const auto* bytes = static_cast<const unsigned char*>(params[i]);
    copies.emplace_back(bytes, bytes + k->sizes[i]);
  }
  submit(stream, [k, copies = std::move(copies)]() mutable {
    std::vector<void*> pointers;
    for (auto& c : copies) pointers.push_back(c.data());
    k->fn(pointers.data(), k->user_data);
  });
  return CUDA_SUCCESS;
}

// --- copies and sets ---------------------------------------------------------------------------------

namespace {

CUresult copy_async(const char* name, void* dst, const void* src, std::size_t n, CUstream handle, bool wait) {
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  if ((dst == nullptr || src == nullptr) && n > 0) return CUDA_ERROR_INVALID_VALUE;
  auto stream = resolve_stream(handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  const std::uint64_t sequence = submit(stream, [dst, src, n] { std::memmove(dst, src, n); });
  if (wait) stream->wait_for(sequence);
  return CUDA_SUCCESS;
}

CUresult set_async(const char* name, void* dst, unsigned char value, std::size_t n, CUstream handle, bool wait) {
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  if (dst == nullptr && n > 0) return CUDA_ERROR_INVALID_VALUE;
  auto stream = resolve_stream(handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  const std::uint64_t sequence = submit(stream, [dst, value, n] { std::memset(dst, value, n); });
  if (wait) stream->wait_for(sequence);
  return CUDA_SUCCESS;
}

void* ptr(CUdeviceptr p) { return reinterpret_cast<void*>(p); }

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

TIDEPOOL_SIM_EXPORT void tidepool_sim_set_capturing(CUstream handle, int capturing) {
  if (auto stream = resolve_stream(handle)) stream->capturing.store(capturing);
}
