// See stream_followers.hpp.
#include "order/stream_followers.hpp"

namespace tidepool::order {

StreamFollowers::Slot* StreamFollowers::track(CUstream stream, CUcontext context,
                                              const std::atomic<std::uint64_t>* generation,
                                              std::uint64_t followed) noexcept {
  if (Slot* known = find(stream)) {
    if (known->context == context && known->generation == generation) {
      known->unjoined.store(true, std::memory_order_release);
      known->followed.store(followed, std::memory_order_release);
      return known;
    }
    forget(stream);  // the fields a submission reads are not rewritten under it
  }
  std::size_t i = home(stream);
  for (std::size_t n = 0; n < kProbes; ++n, i = (i + 1) % kSlots) {
    Slot& slot = slots_[i];
    const CUstream held = slot.stream.load(std::memory_order_acquire);
    if (held != nullptr && held != gone()) continue;
    slot.generation = generation;
    slot.context = context;
    slot.unjoined.store(true, std::memory_order_relaxed);
    slot.followed.store(followed, std::memory_order_relaxed);
    slot.stream.store(stream, std::memory_order_release);
    return &slot;
  }
  return nullptr;
}

void StreamFollowers::forget(CUstream stream) noexcept {
  // A slot given up stays on its probe run (not null), so that streams
  // placed past it are still found.
  if (Slot* slot = find(stream)) slot->stream.store(gone(), std::memory_order_release);
}

}  // namespace tidepool::order
