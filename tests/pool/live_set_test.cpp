// Specification of Segments and LiveSet, the pool's record of where blocks
// are: segments tile their reservations and widen a span that only grows; a
// live block is found from any address inside it, never once it is free or
// its metadata went to another block; buffer ids are unique across pools;
// eviction candidates leave out what may not move. No driver is needed:
// reservations here are bookkeeping over made-up addresses.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "made_up_pages.hpp"
#include "pool/pool.hpp"

namespace tidepool::pool {
namespace {

using made_up::kBase;
using made_up::kPage;

// One segment of `pages` pages at `base`, tiled by blocks of `sizes` bytes
// (the last one takes the rest), all live unless listed in `free_ones`.
class Tiling {
 public:
  Tiling(Segments& segments, std::uintptr_t base, std::size_t pages, const std::vector<std::size_t>& sizes)
      : reservation_(base, pages * kPage, kPage, /*backed_by_chunk=*/false) {
    std::uintptr_t at = base;
    Block* prev = nullptr;
    for (std::size_t i = 0; i <= sizes.size(); ++i) {
      Block* b = store_.make();
      b->address = at;
      b->size = i < sizes.size() ? sizes[i] : base + pages * kPage - at;
      b->prev = prev;
      if (prev != nullptr) prev->next = b;
      blocks_.push_back(b);
      at += b->size;
      prev = b;
    }
    segment_ = segments.add(&reservation_, blocks_.front(), /*arena=*/1);
    for (Block* b : blocks_) b->segment = segment_;
  }
  Block* operator[](std::size_t i) const { return blocks_[i]; }
  [[nodiscard]] std::size_t count() const { return blocks_.size(); }
  [[nodiscard]] const Segment* segment() const { return segment_; }

 private:
  space::Reservation reservation_;
  BlockStore store_;
  std::vector<Block*> blocks_;
  Segment* segment_ = nullptr;
};

void make_live(LiveSet& live, Block* b) {
  b->is_free = false;
  b->requested = b->size;
  live.add(b);
}

TEST(Segments, TheSpanCoversEverySegmentAndOnlyGrows) {
  Segments segments;
  EXPECT_FALSE(segments.may_contain(kBase));
  Tiling high(segments, kBase + 64 * kPage, 4, {});
  Tiling low(segments, kBase, 4, {});
  EXPECT_EQ(segments.count(), 2U);
  EXPECT_EQ(segments.span().first, kBase);
  EXPECT_EQ(segments.span().second, kBase + 68 * kPage);
  EXPECT_TRUE(segments.may_contain(kBase + 10 * kPage)) << "the span is a pre-check: the gap is inside it";
  EXPECT_FALSE(segments.contains(kBase + 10 * kPage)) << "but no segment holds the gap";
  EXPECT_TRUE(segments.contains(kBase + 65 * kPage));
  const space::Reservation* high_reservation = high.segment()->reservation;
  EXPECT_EQ(segments.of(high_reservation), high.segment());
  segments.remove(high.segment());  // the Segment is gone; its reservation is the caller's
  EXPECT_EQ(segments.count(), 1U);
  EXPECT_FALSE(segments.contains(kBase + 65 * kPage));
  EXPECT_TRUE(segments.may_contain(kBase + 65 * kPage)) << "a removed segment leaves the span wide";
  EXPECT_EQ(segments.of(high_reservation), nullptr);
}

TEST(Segments, EveryAddressOfASegmentFallsInExactlyTheBlockThatTilesIt) {
  Segments segments;
  Tiling tiling(segments, kBase, 2, {512, 4096, 1536});
  for (std::size_t i = 0; i < tiling.count(); ++i) {
    const Block* b = tiling[i];
    EXPECT_EQ(segments.block_containing(b->address), b);
    EXPECT_EQ(segments.block_containing(b->address + b->size - 1), b);
  }
  EXPECT_EQ(segments.block_containing(kBase - 1), nullptr);
  EXPECT_EQ(segments.block_containing(kBase + 2 * kPage), nullptr);
}

TEST(LiveSet, ALiveBlockIsFoundFromAnyAddressInsideItAndAFreeOneFromNone) {
  Segments segments;
  LiveSet live(segments);
  Tiling tiling(segments, kBase, 2, {512, 8192, 1024});
  make_live(live, tiling[0]);
  make_live(live, tiling[2]);
  EXPECT_EQ(live.size(), 2U);
  EXPECT_EQ(live.starting_at(tiling[2]->address), tiling[2]);
  EXPECT_EQ(live.starting_at(tiling[2]->address + 8), nullptr) << "starting_at takes only a block's start";
  EXPECT_EQ(live.containing(tiling[2]->address + 1000), tiling[2]);
  EXPECT_EQ(live.at(tiling[2]->address + 1000), tiling[2]);
  EXPECT_EQ(live.at(tiling[1]->address + 8), nullptr) << "block 1 was never handed out";
  EXPECT_EQ(live.containing(tiling[0]->address + 511), tiling[0]);
}

TEST(LiveSet, ACachedAnswerIsDroppedOnceItsBlockIsNoLongerLive) {
  Segments segments;
  LiveSet live(segments);
  Tiling tiling(segments, kBase, 1, {4096});
  Block* b = tiling[0];
  make_live(live, b);
  ASSERT_EQ(live.containing(b->address + 100), b);  // now cached
  ASSERT_EQ(live.remove(b->address), b);
  b->is_free = true;
  b->requested = 0;
  EXPECT_EQ(live.containing(b->address + 100), nullptr);
  // The same metadata handed out again at the same place is that new block.
  make_live(live, b);
  EXPECT_EQ(live.containing(b->address + 100), b);
  // A refused free puts the block back unchanged.
  const std::uint64_t id = b->buffer_id;
  ASSERT_EQ(live.remove(b->address), b);
  EXPECT_EQ(live.starting_at(b->address), nullptr);
  live.restore(b);
  EXPECT_EQ(live.starting_at(b->address), b);
  EXPECT_EQ(live.containing(b->address + 100), b);
  EXPECT_EQ(b->buffer_id, id);
}

TEST(LiveSet, ACachedAnswerIsTrustedOnlyWhileTheMapStillHoldsItsBlock) {
  // The metadata of a block taken out of the set (its range absorbed by its
  // free neighbour, as a merge does) may still look live: the cache must not
  // answer with it.
  Segments segments;
  LiveSet live(segments);
  Tiling tiling(segments, kBase, 1, {4096, 4096});
  Block* low = tiling[0];
  Block* b = tiling[1];
  low->is_free = true;
  make_live(live, b);
  ASSERT_EQ(live.containing(b->address + 100), b);  // now cached
  ASSERT_EQ(live.remove(b->address), b);
  low->size += b->size;  // low absorbs b's range; b's own fields are left as they were
  low->next = b->next;
  if (b->next != nullptr) b->next->prev = low;
  EXPECT_EQ(live.containing(b->address + 100), nullptr) << "the address is in a free block now";
}

TEST(LiveSet, BufferIdsAreUniqueAcrossPoolsAndNeverLookLikeTheDriversOwn) {
  Segments segments;
  LiveSet first(segments);
  LiveSet second(segments);
  Tiling tiling(segments, kBase, 1, {512, 512, 512});
  std::set<std::uint64_t> ids;
  for (std::size_t i = 0; i < tiling.count(); ++i) {
    LiveSet& owner = i % 2 == 0 ? first : second;
    make_live(owner, tiling[i]);
    EXPECT_NE(tiling[i]->buffer_id >> 63, 0U) << "the top bit keeps them apart from the driver's small counters";
    ids.insert(tiling[i]->buffer_id);
    ASSERT_EQ(owner.remove(tiling[i]->address), tiling[i]);
    make_live(owner, tiling[i]);  // again: a new id
    ids.insert(tiling[i]->buffer_id);
  }
  EXPECT_EQ(ids.size(), 2 * tiling.count());
}

TEST(LiveSet, EvictionCandidatesLeaveOutWhatMayNotMove) {
  Segments segments;
  LiveSet live(segments);
  // [small: shares its only page] [2 pages] [keep-resident 2 pages] [2 pages] [rest]
  Tiling tiling(segments, kBase, 8, {512, 2 * kPage, 2 * kPage, 2 * kPage});
  for (std::size_t i = 0; i < tiling.count(); ++i) make_live(live, tiling[i]);
  tiling[2]->keep_resident = true;
  std::vector<EvictionCandidate> out;
  live.eviction_candidates(0, &out);
  std::set<std::uintptr_t> found;
  for (const EvictionCandidate& c : out) {
    found.insert(c.address);
    EXPECT_EQ(c.buffer_id, live.starting_at(c.address)->buffer_id);
  }
  EXPECT_FALSE(found.contains(tiling[0]->address)) << "holds no whole page of its own";
  EXPECT_TRUE(found.contains(tiling[1]->address));
  EXPECT_FALSE(found.contains(tiling[2]->address)) << "keep-resident";
  EXPECT_TRUE(found.contains(tiling[3]->address));
  // Sparing what was used from block 3's use on leaves out block 3 and later.
  live.eviction_candidates(tiling[3]->last_use, &out);
  found.clear();
  for (const EvictionCandidate& c : out) found.insert(c.address);
  EXPECT_TRUE(found.contains(tiling[1]->address));
  EXPECT_FALSE(found.contains(tiling[3]->address));
  EXPECT_FALSE(found.contains(tiling[4]->address));
  // Used again, it is now the most recent, and spared with the rest.
  live.mark_used(tiling[1]);
  live.eviction_candidates(tiling[3]->last_use, &out);
  for (const EvictionCandidate& c : out) EXPECT_NE(c.address, tiling[1]->address);
}

}  // namespace
}  // namespace tidepool::pool
