// See stream_registry.hpp.
#include "pool/stream_registry.hpp"

#include <algorithm>

#include "driver/context.hpp"

namespace tidepool::pool {

namespace {

bool special_handle(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
}

}  // namespace

RetiredStream::~RetiredStream() {
  if (event_ == nullptr || api_.eventDestroy == nullptr) return;
  driver::ScopedContext scope(api_, context_);
  (void)api_.eventDestroy(event_);
}

bool RetiredStream::finished() {
  if (finished_.load(std::memory_order_acquire)) return true;
  if (!recorded_ || api_.eventQuery(event_) != CUDA_SUCCESS) return false;  // not ready, or unknown
  finished_.store(true, std::memory_order_release);
  return true;
}

void StreamRegistry::created(CUstream stream) {
  if (special_handle(stream)) return;
  Entry entry;
  CUgreenCtx green = nullptr;
  if (api_.streamGetCtx == nullptr || api_.streamGetCtx(stream, &entry.context, &green) != CUDA_SUCCESS) {
    (void)api_.ctxGetCurrent(&entry.context);
  }
  unsigned flags = 0;
  // Unknown flags read as non-blocking: a fence then covers the stream itself.
  entry.non_blocking = api_.streamGetFlags == nullptr || api_.streamGetFlags(stream, &flags) != CUDA_SUCCESS ||
                       (flags & CU_STREAM_NON_BLOCKING) != 0;
  std::lock_guard<std::mutex> guard(lock_);
  streams_[stream] = entry;
}

bool StreamRegistry::destroying(CUstream stream) {
  if (special_handle(stream)) return false;
  Entry entry;
  {
    std::lock_guard<std::mutex> guard(lock_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) return false;  // not a stream we saw: the driver will judge the handle
    entry = it->second;
  }
  // The stream stays registered until its retirement is in place, so a fence
  // made meanwhile covers it one way or the other.
  driver::ScopedContext scope(api_, entry.context);
  // A capturing stream cannot take a record outside its graph, yet work
  // queued before the capture began may still run: only a context
  // synchronisation (once the capture is over) proves it finished. The same
  // holds when the event cannot be made or recorded.
  const bool capturing = driver::capturing(api_, stream);
  CUevent event = nullptr;
  if (!capturing && api_.eventCreate(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) event = nullptr;
  const bool recorded = event != nullptr && api_.eventRecord(event, stream) == CUDA_SUCCESS;
  auto retired = std::make_shared<RetiredStream>(api_, entry.context, event, recorded);
  std::lock_guard<std::mutex> guard(lock_);
  streams_.erase(stream);
  std::erase_if(retired_, [](const std::shared_ptr<RetiredStream>& r) { return r->finished(); });
  retired_.push_back(std::move(retired));
  return true;
}

void StreamRegistry::destroy_failed(CUstream stream) { created(stream); }

void StreamRegistry::fence_targets(CUcontext context, std::vector<CUstream>* non_blocking,
                                   std::vector<std::shared_ptr<RetiredStream>>* retired) {
  std::lock_guard<std::mutex> guard(lock_);
  for (const auto& [stream, entry] : streams_) {
    if (entry.non_blocking && entry.context == context) non_blocking->push_back(stream);
  }
  std::erase_if(retired_, [](const std::shared_ptr<RetiredStream>& r) { return r->finished(); });
  for (const auto& r : retired_) {
    if (r->context() == context) retired->push_back(r);
  }
}

bool StreamRegistry::alive(CUstream stream) const {
  std::lock_guard<std::mutex> guard(lock_);
  return streams_.contains(stream);
}

}  // namespace tidepool::pool
