// Specification of Arena: carving keeps a segment tiled, at the end the
// policy names; a freed block merges with its free neighbours, except two
// with work pending on different streams, which stay apart until one
// stream's work is known finished, so no free block ever needs two fences.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "made_up_pages.hpp"
#include "order/order.hpp"
#include "pool/pool.hpp"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"
#include "support/stream_fences_fixture.hpp"

namespace tidepool::pool {
namespace {

using made_up::kBase;
using made_up::kPage;

class ArenaTest : public testing::WithStreamFences {
 protected:
  void SetUp() override {
    WithStreamFences::SetUp();
    for (CUstream s : {first_, second_}) ASSERT_TRUE(fences_->check(key_of(s)).ok());
    arena_ = std::make_unique<Arena>(1, store_, *policy_, *fences_);
    Block* whole = store_.make();
    whole->address = kBase;
    whole->size = reservation_.size();
    whole->stream = kNoPendingWork;
    whole->is_free = true;
    arena_->add(segments_.add(&reservation_, whole, 1));
  }
  void TearDown() override {
    (void)api().ctxSynchronize();
    arena_.reset();
    WithStreamFences::TearDown();
  }

  Block* allocate(std::size_t bytes) {
    const Request request{bytes, kNoPendingWork, false, sequence_++};
    Block* chosen = policy_->choose(arena_->index(), request);
    return chosen == nullptr ? nullptr : arena_->carve(chosen, bytes, request);
  }
  // The segment's blocks tile it exactly, every free one is indexed.
  void expect_tiled() const {
    std::uintptr_t at = kBase;
    std::size_t free_blocks = 0;
    for (const Block* b = arena_->segments().front()->first; b != nullptr; b = b->next) {
      EXPECT_EQ(b->address, at);
      if (b->next != nullptr) {
        EXPECT_EQ(b->next->prev, b);
      }
      EXPECT_EQ(b->is_free, b->in_index);
      free_blocks += b->is_free ? 1 : 0;
      at += b->size;
    }
    EXPECT_EQ(at, kBase + reservation_.size());
    EXPECT_EQ(arena_->index().count(), free_blocks);
    EXPECT_TRUE(arena_->index().check_invariants());
  }
  std::size_t free_blocks() const { return arena_->index().count(); }

  std::unique_ptr<PlacementPolicy> policy_ = make_policy("best_fit");
  BlockStore store_;
  space::Reservation reservation_{kBase, 8 * kPage, kPage, false};
  Segments segments_;
  std::unique_ptr<Arena> arena_;
  std::uint64_t sequence_ = 0;
};

TEST_F(ArenaTest, CarvingAndFreeingInAnyOrderKeepsTheSegmentTiledAndMergesBackToOne) {
  std::vector<Block*> live;
  for (std::size_t bytes : {4096UL, 512UL, kPage, 8192UL, 1536UL}) {
    Block* b = allocate(bytes);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->size, bytes);
    EXPECT_FALSE(b->is_free);
    live.push_back(b);
    expect_tiled();
  }
  EXPECT_EQ(allocate(8 * kPage), nullptr) << "nothing that large is free any more";
  for (std::size_t i : {1U, 3U, 0U, 4U, 2U}) {
    live[i]->stream = kNoPendingWork;
    arena_->release(live[i]);
    expect_tiled();
  }
  EXPECT_EQ(free_blocks(), 1U);
  EXPECT_EQ(arena_->index().largest()->size, reservation_.size());
}

TEST_F(ArenaTest, NeighboursWithWorkPendingOnDifferentStreamsStayApartUntilOneIsKnownFinished) {
  std::vector<Block*> blocks;  // a, b, c, d, and a guard that keeps d from the free tail
  for (int i = 0; i < 5; ++i) {
    blocks.push_back(allocate(kPage));
    ASSERT_NE(blocks.back(), nullptr);
  }
  Block* a = blocks[0];
  Block* b = blocks[1];
  Block* c = blocks[2];
  Block* d = blocks[3];
  const auto free_on = [&](Block* block, CUstream stream) {
    block->stream = key_of(stream);
    block->free_epoch = fences_->freed();
    arena_->release(block);
  };

  // Work held on both streams; a and b freed on different ones.
  testing::Gate gate;
  int first_cell = 0;
  int second_cell = 0;
  ASSERT_EQ(testing::launch_gated_write(first_, &gate, &first_cell, 1), CUDA_SUCCESS);
  ASSERT_EQ(testing::launch_gated_write(second_, &gate, &second_cell, 1), CUDA_SUCCESS);
  free_on(a, first_);
  free_on(b, second_);
  expect_tiled();
  EXPECT_EQ(a->next, b) << "two streams' pending work: not merged";
  EXPECT_EQ(a->size, kPage);
  EXPECT_EQ(a->stream, key_of(first_));
  EXPECT_EQ(b->stream, key_of(second_));

  // c freed on the first stream; once that stream is known past it, d freed
  // on the second merges with it, and the merged block waits for the second.
  free_on(c, first_);
  const std::uint64_t c_epoch = c->free_epoch;
  gate.release();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  // The sim records events asynchronously: the query may wait, as for the
  // requester's own stream.
  ASSERT_TRUE(fences_->query(key_of(first_), c_epoch, key_of(first_), false));
  EXPECT_EQ(b->next, c) << "b and c: different streams, neither known finished when c was freed";
  free_on(d, second_);
  expect_tiled();
  EXPECT_EQ(c->size, 2 * kPage) << "d merged into c";
  EXPECT_EQ(c->stream, key_of(second_));
  // The guard freed on the second stream joins c (same stream, no fence
  // asked) and the idle free tail beyond it.
  Block* guard = blocks[4];
  guard->stream = key_of(second_);
  guard->free_epoch = fences_->freed();
  arena_->release(guard);
  expect_tiled();
  EXPECT_EQ(c->address + c->size, kBase + reservation_.size()) << "same pending stream, then the idle tail: merged";
  EXPECT_EQ(c->stream, key_of(second_));
  EXPECT_EQ(first_cell, 1);
  EXPECT_EQ(second_cell, 1);
}

}  // namespace
}  // namespace tidepool::pool
