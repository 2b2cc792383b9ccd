// Pool: best-fit device memory over virtual-memory segments, for one device.
//
// Blocks are 512-byte-granular sub-ranges of segments (VA reservations), kept
// next to each other; physical pages are mapped only under blocks in use or
// cached free. Small requests (<= small_size) live in their own arena so they
// never pin pages of the large arena. A placement policy picks the free block;
// the pool splits it, coalesces on free, and asks the space layer to back the
// pages beneath.
//
// Stream-ordered reuse: a block freed on stream s is reusable on s at once; a
// request on another stream t first makes t wait on an event recorded on s
// (cuStreamWaitEvent, no host wait). A block freed without a stream (cudaFree
// semantics) waits in a deferred list until an event recorded after the free
// on the legacy stream and every stream the pool has seen completes; frees are
// fenced in batches, so no free pays for a device-wide synchronisation.
//
// Out of device memory, an allocation tries in order: promote deferred frees
// whose fences completed, back from spare pages or within the budget, wait for
// outstanding fences, unmap idle cached pages elsewhere and re-back them here
// (stitching), then fails with out_of_memory and leaves the pool usable.
//
// Thread-safety: one lock (`lock_`) protects all state below. It is held for
// the whole of allocate/deallocate, including slow-path driver calls, and is
// the innermost lock of tidepool: nothing else is locked while it is held.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "driver/driver.hpp"
#include "pool/block.hpp"
#include "pool/block_store.hpp"
#include "pool/free_index.hpp"
#include "pool/policy.hpp"
#include "space/space.hpp"
#include "util/util.hpp"

namespace tidepool::pool {

// Block::stream values that are not streams.
inline constexpr std::uintptr_t kNoPendingWork = ~std::uintptr_t{0};
inline constexpr std::uintptr_t kSeveralStreams = ~std::uintptr_t{0} - 1;

struct Segment {
  space::Reservation* reservation = nullptr;
  Block* first = nullptr;  // the block at the segment's base address
  int arena = 0;
};

struct PoolOptions {
  std::string policy = "best_fit";
  std::size_t small_size = util::MiB;       // requests up to this go to the small arena
  std::size_t small_alignment = 512;        // small requests round to this
  std::size_t large_alignment = 4 * util::KiB;  // large requests round to this: no slivers
  std::size_t segment_bytes = 0;            // VA per segment; 0: twice the device limit
  std::size_t deferred_batch = 256;         // deferred frees per fence
  bool stitch_before_grow = true;           // reuse idle pages before creating new ones
};

struct PoolStats {
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t live_bytes = 0;           // requested bytes in live blocks
  std::uint64_t peak_live_bytes = 0;
  std::uint64_t handed_out_bytes = 0;     // block bytes in live blocks
  std::uint64_t reserved_bytes = 0;       // physical device bytes held
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t spare_bytes = 0;          // physical bytes held but unmapped
  std::uint64_t free_bytes = 0;           // reserved bytes not under live blocks
  std::uint64_t largest_free_block = 0;   // largest allocation servable without new memory
  std::uint64_t deferred_bytes = 0;       // freed, waiting for their fence
  std::uint64_t ooms = 0;
  std::uint64_t maps = 0;
  std::uint64_t unmaps = 0;
  std::uint64_t trims = 0;
  std::uint64_t cross_stream_waits = 0;
  std::uint64_t live_blocks = 0;
  std::uint64_t free_blocks = 0;
  std::uint64_t segments = 0;
  [[nodiscard]] double utilization() const noexcept {
    return peak_reserved_bytes == 0 ? 1.0
                                    : static_cast<double>(peak_live_bytes) / static_cast<double>(peak_reserved_bytes);
  }
  [[nodiscard]] double external_fragmentation() const noexcept {
    return free_bytes == 0 ? 0.0
                           : 1.0 - static_cast<double>(std::min(largest_free_block, free_bytes)) /
                                       static_cast<double>(free_bytes);
  }
};

// One block as a report sees it.
struct BlockView {
  std::uintptr_t address;
  std::size_t size;
  std::size_t requested;  // 0 for free blocks
  bool backed;            // every page beneath is mapped
  int arena;
};

class Pool {
 public:
  static util::Result<std::unique_ptr<Pool>> create(const driver::Driver& driver, space::AddressSpace& space,
                                                    CUcontext context, const PoolOptions& options);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Returns the device address of a block of at least `size` bytes. `ordered`:
  // the memory is used in stream order on `stream` (cudaMallocAsync); else it
  // is usable by any stream at once (cudaMalloc). Size 0 returns 0.
  util::Result<std::uintptr_t> allocate(std::size_t size, std::uintptr_t stream, bool ordered);
  // Frees a block this pool returned. `ordered`: stream-ordered on `stream`;
  // else cudaFree semantics. A pointer that is not the start of a live block
  // is invalid_value and changes nothing.
  util::Status deallocate(std::uintptr_t address, std::uintptr_t stream, bool ordered);

  // The live block starting at `address`, if any: its size as requested.
  [[nodiscard]] bool owns(std::uintptr_t address) const;
  [[nodiscard]] std::size_t requested_size(std::uintptr_t address) const;
  // The live block containing `address` (interior pointers too), for
  // cuMemGetAddressRange and pointer attributes. False when none.
  bool find_containing(std::uintptr_t address, std::uintptr_t* base, std::size_t* size) const;
  // Whether `address` lies inside any segment of this pool.
  [[nodiscard]] bool in_segments(std::uintptr_t address) const;

  // Waits for deferred frees, unmaps every idle page and releases every spare
  // page to the driver. Returns the bytes released.
  std::size_t trim();
  void set_device_limit(std::size_t bytes);
  // `with_fragmentation`: also compute free_bytes and largest_free_block,
  // which walks every free block (O(n)); the counters alone are O(1).
  [[nodiscard]] PoolStats stats(bool with_fragmentation = true) const;
  [[nodiscard]] std::string_view policy_name() const;
  // Every block, free and live, in address order per segment.
  [[nodiscard]] std::vector<BlockView> snapshot() const;

 private:
  struct Arena {
    FreeIndex index;
    std::vector<Segment*> segments;
  };
  struct StreamFence {
    std::uintptr_t stream = 0;
    CUevent event = nullptr;
    std::uint64_t epoch = 0;  // frees on this stream with free_epoch <= epoch are covered
  };
  struct DeferredFence {
    std::vector<CUevent> events;
    std::size_t pending_end = 0;  // deferred_[..pending_end) are covered
  };

  Pool(const driver::Driver& driver, space::AddressSpace& space, CUcontext context, const PoolOptions& options,
       std::unique_ptr<PlacementPolicy> policy);

  Block* allocate_locked(int arena_id, std::size_t rounded, std::uintptr_t stream, bool ordered,
                         util::Status* error);
  Block* try_place(Arena& arena, std::size_t rounded, std::uintptr_t stream, bool ordered, util::Status* error);
  Block* carve(Arena& arena, Block* chosen, std::size_t rounded, const Request& request);
  void release_to_index(Arena& arena, Block* block);
  util::Status add_segment(Arena& arena, int arena_id, std::size_t min_bytes);
  util::Status make_stream_safe(Block* block, std::uintptr_t stream, bool ordered);
  StreamFence& fence_for(std::uintptr_t stream);
  void note_stream(std::uintptr_t stream);
  // Drops a destroyed stream's fence and its place among the known streams.
  void forget_stream(std::uintptr_t stream);

  bool promote_deferred(bool wait);
  void close_deferred_batch();
  std::size_t reclaim_idle_pages(std::size_t pages_needed, std::uintptr_t keep_begin, std::uintptr_t keep_end);
  void synchronize_if_needed();
  std::size_t trim_chunks();
  CUevent take_event();
  void return_event(CUevent event);
  Arena& arena_of(const Block* block) { return arenas_[block->segment->arena]; }

  const driver::Driver& driver_;
  const driver::Api& api_;
  space::AddressSpace& space_;
  CUcontext context_;
  PoolOptions options_;
  std::unique_ptr<PlacementPolicy> policy_;

  mutable util::SpinLock lock_;
  Arena arenas_[2];
  std::vector<std::unique_ptr<Segment>> segments_;
  BlockStore blocks_;
  util::AddressMap<Block> live_;
  std::vector<StreamFence> stream_fences_;
  std::vector<std::uintptr_t> known_streams_;
  std::vector<Block*> deferred_;           // cudaFree-semantics frees awaiting a fence
  std::vector<DeferredFence> deferred_fences_;
  std::size_t deferred_fenced_ = 0;        // deferred_[..deferred_fenced_) have a fence
  std::vector<CUevent> spare_events_;
  std::uint64_t epoch_ = 0;
  std::uint64_t sequence_ = 0;
  bool unsynchronized_async_frees_ = false;
  // Set by try_place when backing failed for lack of pages: how many more
  // pages the chosen range needs, and the range, which reclaiming must spare.
  std::size_t pages_short_ = 0;
  std::uintptr_t keep_begin_ = 0;
  std::uintptr_t keep_end_ = 0;
  PoolStats stats_;
};

}  // namespace tidepool::pool
