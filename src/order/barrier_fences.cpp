// See barrier_fences.hpp.
#include "order/barrier_fences.hpp"

#include <algorithm>

namespace tidepool::order {

void BarrierFences::recorded_barrier(std::uint64_t epoch) {
  if (api_.eventRecord == nullptr || api_.eventQuery == nullptr) return;
  // A record on the legacy stream while another thread captures on a
  // blocking stream would invalidate that capture: no record then (the
  // barrier's blocks settle as they did before these records existed).
  if (driver::capturing(api_, nullptr)) return;
  if (count_ == kKept) {
    // Dropping the oldest record loses only an early answer: its blocks
    // settle with the next record.
    (void)finished_through();
    if (count_ == kKept) pop_oldest(false);
  }
  CUevent event = events_.take();
  if (event == nullptr) return;
  if (api_.eventRecord(event, nullptr) != CUDA_SUCCESS) {
    (void)api_.eventDestroy(event);
    return;
  }
  ring_[(first_ + count_) % kKept] = Record{epoch, event};
  ++count_;
}

void BarrierFences::answer_later(std::uint64_t epoch) {
  if (epoch <= finished_ || (count_ > 0 && ring_[(first_ + count_ - 1) % kKept].epoch >= epoch)) return;
  recorded_barrier(epoch);
}

std::uint64_t BarrierFences::finished_through(std::uint64_t wait_through) {
  // Waits only when a record kept can answer for `wait_through` (its own,
  // or the next one kept if its own was dropped), and no further after an
  // error: a wait for later work would answer nothing more for it.
  bool may_wait = count_ > 0 && wait_through > finished_ && api_.eventSynchronize != nullptr &&
                  ring_[(first_ + count_ - 1) % kKept].epoch >= wait_through;
  while (count_ > 0) {
    const Record& oldest = ring_[first_];
    CUresult r = api_.eventQuery(oldest.event);
    if (r == CUDA_ERROR_NOT_READY && may_wait && finished_ < wait_through) r = api_.eventSynchronize(oldest.event);
    if (r == CUDA_ERROR_NOT_READY) break;
    // An error is never read as finished: the record is dropped unanswered,
    // and its event destroyed rather than reused.
    if (r == CUDA_SUCCESS) {
      finished_ = std::max(finished_, oldest.epoch);
    } else {
      may_wait = false;
    }
    pop_oldest(r != CUDA_SUCCESS);
  }
  return finished_;
}

void BarrierFences::pop_oldest(bool failed) {
  if (failed) {
    (void)api_.eventDestroy(ring_[first_].event);
  } else {
    // An event still recorded is fine to reuse: the next record replaces it.
    events_.give_back(ring_[first_].event);
  }
  ring_[first_] = Record{};
  first_ = (first_ + 1) % kKept;
  --count_;
}

void BarrierFences::clear() {
  while (count_ > 0) pop_oldest(false);
}

}  // namespace tidepool::order
