// Blocks other processes map through IPC (Pool::hold_for_import): the pages
// handed out are the block's own, and while a hold lasts the block's bytes
// are never reused, even after its owner frees it. The sim's physical pages
// are memfds, so a page's file descriptor shows exactly the bytes another
// process would map.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "runtime/allocator.hpp"
#include "support/sim_driver.hpp"

namespace tidepool {
namespace {

using util::MiB;

std::unique_ptr<runtime::Allocator> make_allocator() {
  runtime::AllocatorOptions options;
  options.device_limit = 64 * MiB;
  auto created = runtime::Allocator::create(testing::sim_driver(), options);
  EXPECT_TRUE(created.ok()) << created.status().message();
  return created.ok() ? std::move(created.value()) : nullptr;
}

std::uint64_t buffer_id_of(pool::Pool& pool, std::uintptr_t address) {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::uint64_t id = 0;
  EXPECT_TRUE(pool.find_containing(address, &base, &size, &id));
  return id;
}

TEST(SharedBlocks, TheFileDescriptorsHandedOutAreTheBlocksOwnPages) {
  auto allocator = make_allocator();
  ASSERT_NE(allocator, nullptr);
  pool::Pool& pool = allocator->pool();
  // A small block first, so the shared one starts inside a page.
  auto before = allocator->allocate(64 * 1024, 0, false);
  auto shared = allocator->allocate(3 * MiB, 0, false);
  ASSERT_TRUE(before.ok() && shared.ok());
  const std::uintptr_t address = shared.value();
  for (std::size_t i = 0; i < 3 * MiB; i += 4096) std::memset(reinterpret_cast<void*>(address + i), 0x5c, 4096);

  space::AddressSpace::SharedPages pages;
  ASSERT_TRUE(pool.hold_for_import(address, buffer_id_of(pool, address), &pages).ok());
  ASSERT_FALSE(pages.is_chunk);
  const std::size_t page = pages.page_size;
  ASSERT_GT(page, 0u);
  const std::size_t offset = address - pages.first_page;
  EXPECT_LT(offset, page);
  EXPECT_EQ(pages.fds.size(), (offset + 3 * MiB + page - 1) / page);
  // Every byte of the block, read through the fds as the importer maps them.
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < pages.fds.size(); ++i) {
    void* view = ::mmap(nullptr, page, PROT_READ, MAP_SHARED, pages.fds[i], 0);
    ASSERT_NE(view, MAP_FAILED);
    const auto* bytes = static_cast<const unsigned char*>(view);
    for (std::size_t b = 0; b < page; ++b) {
      const std::size_t at = i * page + b;
      if (at >= offset && at < offset + 3 * MiB && bytes[b] != 0x5c) ++wrong;
    }
    ::munmap(view, page);
    ::close(pages.fds[i]);
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_TRUE(pool.release_import_hold(address, buffer_id_of(pool, address)) == false);  // not freed: stays live
  EXPECT_TRUE(allocator->deallocate(address, 0, false).ok());
  EXPECT_TRUE(allocator->deallocate(before.value(), 0, false).ok());
}

TEST(SharedBlocks, AFreeOfAHeldBlockWaitsForItsLastHoldAndASecondFreeIsADoubleFree) {
  auto allocator = make_allocator();
  ASSERT_NE(allocator, nullptr);
  pool::Pool& pool = allocator->pool();
  auto shared = allocator->allocate(4 * MiB, 0, false);
  ASSERT_TRUE(shared.ok());
  const std::uintptr_t address = shared.value();
  const std::uint64_t id = buffer_id_of(pool, address);
  space::AddressSpace::SharedPages first;
  space::AddressSpace::SharedPages second;
  ASSERT_TRUE(pool.hold_for_import(address, id, &first).ok());
  ASSERT_TRUE(pool.hold_for_import(address, id, &second).ok());
  for (int fd : first.fds) ::close(fd);
  for (int fd : second.fds) ::close(fd);
  const std::uint64_t frees = pool.stats(false).frees;

  ASSERT_TRUE(allocator->deallocate(address, 0, false).ok());
  EXPECT_TRUE(pool.owns(address)) << "freed while held: still the importers'";
  EXPECT_FALSE(allocator->deallocate(address, 0, false).ok()) << "a second free is a double free";
  space::AddressSpace::SharedPages late;
  EXPECT_FALSE(pool.hold_for_import(address, id, &late).ok()) << "a freed block opens no more";
  // Its bytes are not handed out again while held, however often we ask.
  for (int i = 0; i < 8; ++i) {
    auto other = allocator->allocate(4 * MiB, 0, false);
    ASSERT_TRUE(other.ok());
    EXPECT_NE(other.value(), address);
    const bool overlaps = other.value() < address + 4 * MiB && address < other.value() + 4 * MiB;
    EXPECT_FALSE(overlaps);
    ASSERT_TRUE(allocator->deallocate(other.value(), 0, false).ok());
  }
  EXPECT_EQ(pool.stats(false).frees, frees + 8);

  EXPECT_FALSE(pool.release_import_hold(address, id)) << "one hold is left";
  EXPECT_TRUE(pool.owns(address));
  EXPECT_TRUE(pool.release_import_hold(address, id)) << "the last hold takes the free";
  EXPECT_FALSE(pool.owns(address));
  EXPECT_EQ(pool.stats(false).frees, frees + 9);
  EXPECT_EQ(pool.stats(false).live_bytes, 0u);
  EXPECT_FALSE(pool.release_import_hold(address, id)) << "no hold is left to end";
}

}  // namespace
}  // namespace tidepool
