// Block: one contiguous range of a segment, free or in use.
//
// Blocks of a segment tile it exactly: `prev`/`next` link address neighbours
// and `prev->address + prev->size == address` always holds. A free block is
// in its arena's FreeIndex (in_index) unless it waits in the deferred list.
// The tree links below belong to the FreeIndex; nothing else touches them.
// Metadata comes from the BlockStore, never from the heap on the fast path.
#pragma once

#include <cstddef>
#include <cstdint>

#include "order/order.hpp"

namespace tidepool::pool {

// What a free block's `stream` may say besides a stream key (order/stream_keys.hpp).
using order::kAfterBarrier;
using order::kNoPendingWork;

struct Segment;

struct Block {
  std::uintptr_t address = 0;
  std::size_t size = 0;       // bytes of the range, a multiple of 512
  std::size_t requested = 0;  // bytes the user asked for; 0 while free
  Block* prev = nullptr;      // address neighbour in the same segment
  Block* next = nullptr;
  Segment* segment = nullptr;
  std::uintptr_t stream = 0;     // stream key of the last free with work pending, or kNoPendingWork
  std::uint64_t free_epoch = 0;  // when it was last freed in stream order
  std::uint64_t freed_at = 0;    // the pool's allocation count when it was last freed (merges keep the latest)
  std::uint64_t buffer_id = 0;   // while live: unique for the life of the process
  std::uint64_t last_use = 0;    // while live: the pool's use clock at its last known use (residency)
  bool keep_resident = false;    // while live: never evicted (TIDEPOOL_ADVICE_KEEP_RESIDENT)
  // While live, for the residency rule (pool.hpp, "When a page may move"):
  // submissions (launches, copies, sets) that named the block and may not be
  // queued yet; its pages do not move while any does.
  std::uint32_t pins = 0;
  // A submission was queued to touch the block while pages of it were on
  // the host: until a gated move has waited for that work, only a gated
  // move may bring those pages back.
  bool read_on_host = false;
  // Named by a submission of another device, whose streams no gate of this
  // pool orders: its pages stay on the device until it is freed.
  bool peer_held = false;
  // Instantiated graphs whose kernels name the block: graph launches pass no
  // hook, so its pages stay on the device while any such graph exists.
  std::uint32_t graph_holds = 0;
  // Other processes that map it (IPC, Pool::hold_for_import): its pages stay
  // on the device, and a free of it waits (freed_while_shared) until the
  // last of them lets go, so they never see its bytes reused.
  std::uint32_t import_holds = 0;
  bool freed_while_shared = false;
  // While live: who asked for it (OwnerBytes, the caller's tag).
  std::uint16_t owner = 0;
  bool is_free = false;
  bool in_index = false;

  // FreeIndex links: a (size, address) tree and an address tree augmented
  // with the largest size below each node.
  Block* size_left = nullptr;
  Block* size_right = nullptr;
  Block* address_left = nullptr;
  Block* address_right = nullptr;
  std::size_t subtree_max_size = 0;
  std::uint32_t priority = 0;
};

// Whether the work pending on free block `b` is known finished; if so it is
// marked so (kNoPendingWork). Asks the driver nothing.
inline bool settle(Block& b, const order::StreamFences& fences) {
  if (b.stream == kNoPendingWork) return true;
  if (!fences.finished(b.stream, b.free_epoch)) return false;
  b.stream = kNoPendingWork;
  return true;
}

// settle(), and failing that, asks the driver (order::StreamFences::query):
// waits only when the block's stream is `may_wait_for` (the requesting
// stream's own earlier work), or, `wait_for_barrier`, for the work before the
// device barrier a block put back behind one came back with.
inline bool settle_by_query(Block& b, order::StreamFences& fences, std::uintptr_t may_wait_for,
                            bool wait_for_barrier = false) {
  if (settle(b, fences)) return true;
  if (!fences.query(b.stream, b.free_epoch, may_wait_for, wait_for_barrier)) return false;
  b.stream = kNoPendingWork;
  return true;
}

}  // namespace tidepool::pool
