// See barrier_fences.hpp.
#include "pool/barrier_fences.hpp"

#include <algorithm>

namespace tidepool::pool {

void BarrierFences::recorded_barrier(std::uint64_t epoch) {
  if (api_.eventRecord == nullptr || api_.eventQuery == nullptr) return;
  if (count_ == kKept) {
    // Dropping the oldest record loses only an early answer: its blocks
    // settle with the next record.
    (void)finished_through();
    if (count_ == kKept) pop_oldest();
  }
  CUevent event = events_.take();
  if (event == nullptr) return;
  if (api_.eventRecord(event, nullptr) != CUDA_SUCCESS) {
    events_.give_back(event);
    return;
  }
  ring_[(first_ + count_) % kKept] = Record{epoch, event};
  ++count_;
}

std::uint64_t BarrierFences::finished_through(std::uint64_t wait_through) {
  while (count_ > 0) {
    const Record& oldest = ring_[first_];
    CUresult r = api_.eventQuery(oldest.event);
    // Waits until `wait_through` is known finished: its own record, or, if
    // that one was dropped, the next one kept (a record finishes only after
    // the work before it, on one stream).
    if (r == CUDA_ERROR_NOT_READY && finished_ < wait_through && api_.eventSynchronize != nullptr) {
      r = api_.eventSynchronize(oldest.event);
    }
    if (r == CUDA_ERROR_NOT_READY) break;
    // An error is never read as finished: the record is dropped unanswered.
    if (r == CUDA_SUCCESS) finished_ = std::max(finished_, oldest.epoch);
    pop_oldest();
  }
  return finished_;
}

void BarrierFences::pop_oldest() {
  events_.give_back(ring_[first_].event);
  ring_[first_] = Record{};
  first_ = (first_ + 1) % kKept;
  --count_;
}

void BarrierFences::clear() {
  while (count_ > 0) pop_oldest();
}

}  // namespace tidepool::pool
