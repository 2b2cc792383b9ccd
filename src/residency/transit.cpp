// See transit.hpp.
#include "residency/transit.hpp"

#include <algorithm>
#include <atomic>

#include "residency/compressor.hpp"

namespace tidepool::residency {

util::Result<std::unique_ptr<Transit>> Transit::create(const driver::Driver& driver, CUcontext context,
                                                       order::StreamRegistry& streams, std::size_t page_size) {
  const driver::Api& api = driver.api();
  if (api.streamCreate == nullptr || api.memcpyDtoDAsync == nullptr || api.eventSynchronize == nullptr) {
    return util::Status(util::Error::not_supported, "the driver lacks the stream and copy entry points eviction needs");
  }
  std::unique_ptr<Transit> transit(new Transit(driver, context, streams, page_size));
  driver::ScopedContext scope(api, context);
  if (auto s = driver::check(api.streamCreate(&transit->to_host_stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      !s) {
    return s;
  }
  if (auto s = driver::check(api.streamCreate(&transit->to_device_stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      !s) {
    return s;
  }
  if (auto s = driver::check(api.streamCreate(&transit->gate_stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); !s) {
    return s;
  }
  // The moves queue work on these: the legacy stream's order no longer
  // orders all work (order/stream_registry.hpp, legacy_only).
  for (CUstream s : {transit->to_host_stream_, transit->to_device_stream_, transit->gate_stream_})
    streams.using_stream(s);
  transit->joined_ = transit->events_.take();
  transit->copied_ = transit->events_.take();
  if (transit->joined_ == nullptr || transit->copied_ == nullptr) {
    return util::Status(util::Error::driver_error, "cuEventCreate failed for the copy events");
  }
  // The gate's flag. Without it (or without cuStreamWaitValue32) every move
  // takes the fallback.
  void* flag = nullptr;
  if (api.memHostAlloc != nullptr && api.memHostGetDevicePointer != nullptr && api.streamWaitValue32 != nullptr &&
      api.memHostAlloc(&flag, sizeof(std::uint32_t), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) ==
          CUDA_SUCCESS) {
    if (api.memHostGetDevicePointer(&transit->flag_device_, flag, 0) == CUDA_SUCCESS) {
      transit->flag_ = static_cast<volatile std::uint32_t*>(flag);
      *transit->flag_ = 0;
    } else {
      (void)api.memFreeHost(flag);
    }
  }
  return transit;
}

Transit::Transit(const driver::Driver& driver, CUcontext context, order::StreamRegistry& streams, std::size_t page_size)
    : api_(driver.api()), context_(context), registry_(streams), page_size_(page_size) {}

Transit::~Transit() {
  driver::ScopedContext scope(api_, context_);
  (void)reap(true);
  if (to_host_stream_ != nullptr) (void)api_.streamSynchronize(to_host_stream_);
  if (to_device_stream_ != nullptr) (void)api_.streamSynchronize(to_device_stream_);
  if (gate_stream_ != nullptr) (void)api_.streamSynchronize(gate_stream_);
  events_.clear();
  if (joined_ != nullptr) (void)api_.eventDestroy(joined_);
  if (copied_ != nullptr) (void)api_.eventDestroy(copied_);
  if (to_host_stream_ != nullptr) (void)api_.streamDestroy(to_host_stream_);
  if (to_device_stream_ != nullptr) (void)api_.streamDestroy(to_device_stream_);
  if (gate_stream_ != nullptr) (void)api_.streamDestroy(gate_stream_);
  if (flag_ != nullptr) (void)api_.memFreeHost(const_cast<std::uint32_t*>(flag_));
}

std::uint32_t Transit::next_generation() noexcept {
  // The wait is flag >= generation: after a wrap, generation 0 would pass
  // at once, so the flag restarts at 0 and generations at 1.
  if (++generation_ == 0) {
    *flag_ = 0;
    generation_ = 1;
  }
  return generation_;
}

void Transit::open(std::uint32_t generation) noexcept {
  if (flag_ == nullptr) return;
  std::atomic_thread_fence(std::memory_order_release);
  *flag_ = generation;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool Transit::fill(CUdeviceptr to, const space::HostPage& from, CUstream stream) {
  if (stream == to_device_stream_) ++fills_queued_;
  if (compressor_ != nullptr) return compressor_->fill(to, from, stream);
  return api_.memcpyDtoDAsync(to, from.staging, page_size_, stream) == CUDA_SUCCESS;
}

void Transit::time_copies(CUevent start, CUevent end, std::uint64_t bytes, bool to_host) {
  float ms = 0;
  if (api_.eventElapsedTime == nullptr || api_.eventElapsedTime(&ms, start, end) != CUDA_SUCCESS) return;
  if (to_host) {
    stats_.to_host_ms += ms;
    stats_.timed_to_host_bytes += bytes;
  } else {
    stats_.to_device_ms += ms;
    stats_.timed_to_device_bytes += bytes;
  }
}

std::size_t Transit::tally(const std::vector<PageMove>& moves, std::uint64_t* moved_bytes) {
  std::size_t moved = 0;
  for (const PageMove& m : moves) moved += m.moved ? 1 : 0;
  *moved_bytes += moved * page_size_;
  stats_.failed_moves += moves.size() - moved;
  return moved;
}

std::size_t Transit::to_host(space::AddressSpace& space, std::vector<PageMove>& moves,
                             const std::vector<CUevent>& fills) {
  if (moves.empty()) return 0;
  driver::ScopedContext scope(api_, context_);
  if (!gated_to_host(space, moves, fills)) fallback_to_host(space, moves);
  return tally(moves, &stats_.to_host_bytes);
}

bool Transit::gated_to_host(space::AddressSpace& space, std::vector<PageMove>& moves,
                            const std::vector<CUevent>& fills) {
  if (flag_ == nullptr) return false;
  const std::uint32_t generation = next_generation();
  bool waiting = false;  // the gate stream waits for the flag: it must be opened
  // Opens the flag on every way out once the gate stream waits for it,
  // an exception included: a gate left shut stops the device for good.
  OpenOnExit guard{this, generation, &waiting};
  const bool gate = registry_.device_gate(context_, [&](CUstream* ends_on) {
    if (!shut(generation, &waiting, ends_on)) return false;
    if (api_.streamWaitEvent(to_host_stream_, joined_, 0) != CUDA_SUCCESS) return false;
    for (CUevent fill : fills) {
      if (api_.streamWaitEvent(to_host_stream_, fill, 0) != CUDA_SUCCESS) return false;
    }
    if (compressing(moves)) return true;  // the compressor reads the pages once the gate is shut, below
    for (const PageMove& m : moves) {
      const CUdeviceptr from = m.reservation->page_address(m.page);
      if (api_.memcpyDtoDAsync(m.host->staging, from, page_size_, to_host_stream_) != CUDA_SUCCESS) return false;
    }
    return api_.eventRecord(copied_, to_host_stream_) == CUDA_SUCCESS;
  });
  if (!gate) return false;  // the guard opens the flag
  if (compressing(moves)) {
    // Moves the compressor gave a page to are remapped, even if a later
    // group of the batch failed.
    const bool done = compressor_->to_host(moves, to_host_stream_, &stats_.wait_ms);
    // Timed from the join to the end of the codec's work: the evicted bytes
    // per second, whatever crossed the bus for them.
    if (done && api_.eventRecord(copied_, to_host_stream_) == CUDA_SUCCESS &&
        api_.eventSynchronize(copied_) == CUDA_SUCCESS) {
      time_copies(joined_, copied_, moves.size() * page_size_, true);
    }
    remap_to_host(space, moves);
    stats_.gates++;
    return true;
  }
  {
    const util::HostTime waited(&stats_.wait_ms);
    if (api_.eventSynchronize(copied_) != CUDA_SUCCESS) return true;  // the copies did not finish: nothing moves
  }
  time_copies(joined_, copied_, moves.size() * page_size_, true);
  remap_to_host(space, moves);
  stats_.gates++;
  return true;
}

bool Transit::shut(std::uint32_t generation, bool* waiting, CUstream* ends_on) {
  // The gate ends on the gate stream, after the flag: every stream's later
  // work waits for it, and the host queues nothing on the legacy stream
  // behind the flag.
  if (api_.eventRecord(joined_, nullptr) != CUDA_SUCCESS ||
      api_.streamWaitEvent(gate_stream_, joined_, 0) != CUDA_SUCCESS) {
    return false;
  }
  *waiting = api_.streamWaitValue32(gate_stream_, flag_device_, generation, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS;
  if (!*waiting) return false;
  *ends_on = gate_stream_;
  return true;
}

bool Transit::synchronize_context() {
  // A context synchronisation during any capture would invalidate it.
  if (registry_.capture_in_progress(context_) || api_.ctxSynchronize == nullptr) return false;
  const util::HostTime waited(&stats_.wait_ms);
  return api_.ctxSynchronize() == CUDA_SUCCESS;
}

void Transit::fallback_to_host(space::AddressSpace& space, std::vector<PageMove>& moves) {
  if (!synchronize_context()) return;  // nothing can be proven idle: nothing moves, the pages intact
  stats_.fallbacks++;
  if (compressing(moves)) {
    (void)compressor_->to_host(moves, to_host_stream_, &stats_.wait_ms);
    remap_to_host(space, moves);
    return;
  }
  for (const PageMove& m : moves) {
    const CUdeviceptr from = m.reservation->page_address(m.page);
    if (api_.memcpyDtoDAsync(m.host->staging, from, page_size_, to_host_stream_) != CUDA_SUCCESS) return;
  }
  {
    const util::HostTime waited(&stats_.wait_ms);
    if (api_.streamSynchronize(to_host_stream_) != CUDA_SUCCESS) return;
  }
  remap_to_host(space, moves);
}

void Transit::remap_to_host(space::AddressSpace& space, std::vector<PageMove>& moves) {
  const util::HostTime remapping(&stats_.remap_ms);
  std::vector<space::AddressSpace::PageMoveRef> refs;
  refs.reserve(moves.size());
  for (const PageMove& m : moves) refs.push_back({m.reservation, m.page, m.host, nullptr, {}});
  space.move_to_host(refs);
  for (std::size_t i = 0; i < moves.size(); ++i) moves[i].moved = static_cast<bool>(refs[i].status);
}

std::size_t Transit::to_device(space::AddressSpace& space, std::vector<PageMove>& moves) {
  if (moves.empty()) return 0;
  driver::ScopedContext scope(api_, context_);
  if (moves.size() <= kMaxPagesPerGate) {
    if (!gated_to_device(space, moves)) fallback_to_device(space, moves);
    return tally(moves, &stats_.to_device_bytes);
  }
  // A gate's fills wait behind its flag, which the host opens only once the
  // gate is made: more of them than a stream's queue holds would block the
  // host that must open it. So a large move goes through several gates.
  std::vector<PageMove> batch;
  batch.reserve(kMaxPagesPerGate);
  for (std::size_t first = 0; first < moves.size(); first += kMaxPagesPerGate) {
    const auto begin = moves.begin() + static_cast<std::ptrdiff_t>(first);
    const auto end = moves.begin() + static_cast<std::ptrdiff_t>(std::min(moves.size(), first + kMaxPagesPerGate));
    batch.assign(begin, end);
    if (!gated_to_device(space, batch)) fallback_to_device(space, batch);
    std::copy(batch.begin(), batch.end(), begin);
  }
  return tally(moves, &stats_.to_device_bytes);
}

bool Transit::gated_to_device(space::AddressSpace& space, std::vector<PageMove>& moves) {
  if (flag_ == nullptr) return false;
  PendingRelease pending;
  pending.start = events_.take();
  pending.done = events_.take();
  if (pending.start == nullptr || pending.done == nullptr) {
    if (pending.start != nullptr) events_.give_back(pending.start);
    if (pending.done != nullptr) events_.give_back(pending.done);
    return false;
  }
  pending.pages.reserve(moves.size());
  // A compressed page's address maps nothing and no access may reach it
  // (compressor.hpp), so it takes its device page now, before the gate:
  // its unpack, queued behind the flag, then always writes into a mapped
  // page. One that gets none stays compressed and is not filled.
  const bool any_compressed =
      std::any_of(moves.begin(), moves.end(), [](const PageMove& m) { return m.host->compressed; });
  if (any_compressed) {
    const util::HostTime remapping(&stats_.remap_ms);
    for (PageMove& m : moves) {
      if (!m.host->compressed) continue;
      space::HostPage* released = nullptr;
      m.moved = static_cast<bool>(space.move_to_device(*m.reservation, m.page, &released));
      if (m.moved) pending.pages.push_back(released);
    }
  }
  const std::uint32_t generation = next_generation();
  bool waiting = false;
  OpenOnExit guard{this, generation, &waiting};
  const bool gate = registry_.device_gate(context_, [&](CUstream* ends_on) {
    // The gate stream then waits for the fills too: the gate ends after them.
    if (!shut(generation, &waiting, ends_on)) return false;
    if (api_.eventRecord(pending.start, gate_stream_) != CUDA_SUCCESS ||
        api_.streamWaitEvent(to_device_stream_, pending.start, 0) != CUDA_SUCCESS) {
      return false;
    }
    for (const PageMove& m : moves) {
      // Into the page's own address: a raw page's is a device page by the
      // time the flag lets this run. A raw page whose remap fails keeps its
      // host page there, and the copy writes that page onto itself.
      if (m.host->compressed && !m.moved) continue;
      const CUdeviceptr to = m.reservation->page_address(m.page);
      if (!fill(to, *m.host, to_device_stream_)) return false;
    }
    return api_.eventRecord(pending.done, to_device_stream_) == CUDA_SUCCESS &&
           api_.streamWaitEvent(gate_stream_, pending.done, 0) == CUDA_SUCCESS;
  });
  bool joined = false;
  if (gate) {
    const util::HostTime waited(&stats_.wait_ms);
    joined = api_.eventSynchronize(joined_) == CUDA_SUCCESS;
  }
  if (!joined) {
    // The copies may be queued behind the flag: they run once it opens, on
    // raw pages still mapped to their host pages, writing each onto itself.
    if (waiting) {
      open(generation);
      (void)api_.streamSynchronize(to_device_stream_);
    }
    guard.open_now();
    events_.give_back(pending.start);
    events_.give_back(pending.done);
    if (any_compressed) settle_compressed(space, moves, std::move(pending.pages));
    return false;
  }
  {
    const util::HostTime remapping(&stats_.remap_ms);
    std::vector<space::AddressSpace::PageMoveRef> refs;
    std::vector<PageMove*> raw;
    refs.reserve(moves.size());
    raw.reserve(moves.size());
    for (PageMove& m : moves) {
      if (m.host->compressed) continue;  // remapped before the gate
      refs.push_back({m.reservation, m.page, nullptr, nullptr, {}});
      raw.push_back(&m);
    }
    space.move_to_device(refs);
    for (std::size_t i = 0; i < refs.size(); ++i) {
      raw[i]->moved = static_cast<bool>(refs[i].status);
      if (raw[i]->moved) pending.pages.push_back(refs[i].released);
    }
  }
  guard.open_now();
  stats_.gates++;
  pending.bytes = pending.pages.size() * page_size_;
  pending_.push_back(std::move(pending));
  return true;
}

void Transit::settle_compressed(space::AddressSpace& space, std::vector<PageMove>& moves,
                                std::vector<space::HostPage*> released) {
  // No gate: the compressed pages already on the device are unpacked now
  // (again, if their unpack was queued and ran), with the host waiting. No
  // access reaches them until the caller returns. One whose unpack fails
  // goes back to its stream, which still holds its bytes.
  std::size_t k = 0;
  for (PageMove& m : moves) {
    if (!m.host->compressed || !m.moved) continue;
    space::HostPage* stream_page = released[k++];
    const CUdeviceptr to = m.reservation->page_address(m.page);
    const bool unpacked =
        fill(to, *stream_page, to_device_stream_) && api_.streamSynchronize(to_device_stream_) == CUDA_SUCCESS;
    // Whatever was queued is past (or the stream broken) before the device
    // page is unmapped or the stream's extent handed back.
    if (!unpacked) (void)api_.streamSynchronize(to_device_stream_);
    if (unpacked || !space.move_to_host(*m.reservation, m.page, stream_page)) {
      PendingRelease done;
      done.pages.push_back(stream_page);
      pending_.push_back(std::move(done));
      m.moved = unpacked;  // else lost: neither its stream nor its device page can serve it
    } else {
      m.moved = false;  // compressed again, for the fallback to bring back
    }
  }
}

std::vector<space::HostPage*> Transit::remap_and_fill(space::AddressSpace& space, std::vector<PageMove>& moves) {
  const util::HostTime remapping(&stats_.remap_ms);
  std::vector<space::HostPage*> released_pages;
  released_pages.reserve(moves.size());
  for (PageMove& m : moves) {
    if (m.moved) continue;  // already on the device (a compressed page settled by a failed gate)
    space::HostPage* released = nullptr;
    m.moved = static_cast<bool>(space.move_to_device(*m.reservation, m.page, &released));
    if (!m.moved) continue;
    const CUdeviceptr to = m.reservation->page_address(m.page);
    if (!fill(to, *released, to_device_stream_)) {
      // The bytes are still on the host page: map it back rather than lose them.
      (void)api_.streamSynchronize(to_device_stream_);
      (void)space.move_to_host(*m.reservation, m.page, released);
      m.moved = false;
      continue;
    }
    released_pages.push_back(released);
  }
  return released_pages;
}

void Transit::fallback_to_device(space::AddressSpace& space, std::vector<PageMove>& moves) {
  if (!synchronize_context()) return;  // nothing can be proven idle: nothing moves, the pages intact
  stats_.fallbacks++;
  std::vector<space::HostPage*> released_pages = remap_and_fill(space, moves);
  {
    const util::HostTime waited(&stats_.wait_ms);
    (void)api_.streamSynchronize(to_device_stream_);
  }
  PendingRelease done;
  done.pages = std::move(released_pages);
  pending_.push_back(std::move(done));
}

bool Transit::precopy_to_host(std::vector<PageMove>& moves, CUevent* start, CUevent* done) {
  *start = nullptr;
  *done = nullptr;
  if (moves.empty()) return false;
  driver::ScopedContext scope(api_, context_);
  CUevent begun = events_.take();
  CUevent copied = events_.take();
  bool queued = false;  // some copy may be on the stream
  const bool ordered = begun != nullptr && copied != nullptr && registry_.device_gate(context_, [&](CUstream*) {
    if (api_.eventRecord(begun, nullptr) != CUDA_SUCCESS ||
        api_.streamWaitEvent(to_host_stream_, begun, 0) != CUDA_SUCCESS) {
      return false;
    }
    for (const PageMove& m : moves) {
      queued = true;
      const CUdeviceptr from = m.reservation->page_address(m.page);
      if (api_.memcpyDtoDAsync(m.host->staging, from, page_size_, to_host_stream_) != CUDA_SUCCESS) return false;
    }
    return api_.eventRecord(copied, to_host_stream_) == CUDA_SUCCESS;
  });
  if (!ordered) {
    // Copies may still be writing the host pages: the caller gets them back
    // only after the stream has passed them.
    if (queued) (void)api_.streamSynchronize(to_host_stream_);
    if (begun != nullptr) events_.give_back(begun);
    if (copied != nullptr) events_.give_back(copied);
    return false;
  }
  *start = begun;
  *done = copied;
  return true;
}

std::size_t Transit::commit_to_host(space::AddressSpace& space, std::vector<PageMove>& moves, CUevent start,
                                    CUevent done) {
  driver::ScopedContext scope(api_, context_);
  bool copied = false;
  {
    const util::HostTime waited(&stats_.wait_ms);
    copied = api_.eventSynchronize(done) == CUDA_SUCCESS;
  }
  if (copied) {
    time_copies(start, done, moves.size() * page_size_, true);
    remap_to_host(space, moves);
  }
  events_.give_back(start);
  events_.give_back(done);
  stats_.tracked++;
  return tally(moves, &stats_.to_host_bytes);
}

std::size_t Transit::tracked_to_device(space::AddressSpace& space, std::vector<PageMove>& moves, CUevent* done) {
  *done = nullptr;
  if (moves.empty()) return 0;
  driver::ScopedContext scope(api_, context_);
  PendingRelease pending;
  pending.start = events_.take();
  pending.done = events_.take();
  if (pending.start == nullptr || pending.done == nullptr ||
      api_.eventRecord(pending.start, to_device_stream_) != CUDA_SUCCESS) {
    if (pending.start != nullptr) events_.give_back(pending.start);
    if (pending.done != nullptr) events_.give_back(pending.done);
    return 0;
  }
  pending.pages = remap_and_fill(space, moves);
  if (api_.eventRecord(pending.done, to_device_stream_) != CUDA_SUCCESS) {
    // Nothing can order a launch after the copies: the host waits for them.
    (void)api_.streamSynchronize(to_device_stream_);
    events_.give_back(pending.done);
    pending.done = nullptr;
  }
  *done = pending.done;
  stats_.tracked++;
  pending.bytes = pending.pages.size() * page_size_;
  const std::size_t moved = tally(moves, &stats_.to_device_bytes);
  pending_.push_back(std::move(pending));
  return moved;
}

void Transit::release_after(CUevent start, CUevent done, std::vector<space::HostPage*> pages) {
  PendingRelease pending;
  pending.done = done;
  pending.pages = std::move(pages);
  pending_.push_back(std::move(pending));
  if (start != nullptr) events_.give_back(start);
}

std::vector<space::HostPage*> Transit::reap(bool wait) {
  std::vector<space::HostPage*> ready;
  if (pending_.empty()) return ready;
  driver::ScopedContext scope(api_, context_);
  for (auto it = pending_.begin(); it != pending_.end();) {
    bool finished = it->done == nullptr;
    if (!finished) {
      const CUresult r = wait ? api_.eventSynchronize(it->done) : api_.eventQuery(it->done);
      // An error reads as finished only after a wait: the stream is past
      // the copies or broken, and the pages are not read again either way.
      finished = r == CUDA_SUCCESS || (wait && r != CUDA_ERROR_NOT_READY);
      if (r == CUDA_SUCCESS && it->start != nullptr) time_copies(it->start, it->done, it->bytes, false);
    }
    if (!finished) {
      ++it;
      continue;
    }
    ready.insert(ready.end(), it->pages.begin(), it->pages.end());
    if (it->start != nullptr) events_.give_back(it->start);
    if (it->done != nullptr) events_.give_back(it->done);
    it = pending_.erase(it);
  }
  return ready;
}

}  // namespace tidepool::residency
