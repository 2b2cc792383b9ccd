// Blocks other processes map through IPC (Pool::hold_for_import): the pages
// handed out are the block's own, and while a hold lasts the block's bytes
// are never reused, even after its owner frees it. The sim's physical pages
// are memfds, so a page's file descriptor shows exactly the bytes another
// process would map.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "runtime/allocator.hpp"
#include "runtime/ipc_exporter.hpp"
#include "runtime/ipc_importer.hpp"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"

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

// How long an import may wait for the work queued before it.
std::chrono::steady_clock::time_point soon() { return std::chrono::steady_clock::now() + std::chrono::seconds(5); }

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
  auto before = allocator->allocate(std::size_t{64} * 1024, 0, false);
  auto shared = allocator->allocate(3 * MiB, 0, false);
  ASSERT_TRUE(before.ok() && shared.ok());
  const std::uintptr_t address = shared.value();
  for (std::size_t i = 0; i < 3 * MiB; i += 4096) std::memset(reinterpret_cast<void*>(address + i), 0x5c, 4096);

  space::AddressSpace::SharedPages pages;
  ASSERT_TRUE(pool.hold_for_import(address, buffer_id_of(pool, address), &pages, soon()).ok());
  ASSERT_FALSE(pages.is_chunk);
  const std::size_t page = pages.page_size;
  ASSERT_GT(page, 0u);
  const std::size_t offset = address - pages.first_page;
  EXPECT_LT(offset, page);
  EXPECT_EQ(pages.pages.size(), (offset + 3 * MiB + page - 1) / page);
  // Every byte of the block, read through the pages' fds as the importer maps them.
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < pages.pages.size(); ++i) {
    int fd = -1;
    ASSERT_EQ(testing::sim_driver().api().memExportToShareableHandle(&fd, pages.pages[i],
                                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_SUCCESS);
    void* view = ::mmap(nullptr, page, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    ASSERT_NE(view, MAP_FAILED);
    const auto* bytes = static_cast<const unsigned char*>(view);
    for (std::size_t b = 0; b < page; ++b) {
      const std::size_t at = i * page + b;
      if (at >= offset && at < offset + 3 * MiB && bytes[b] != 0x5c) ++wrong;
    }
    ::munmap(view, page);
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
  ASSERT_TRUE(pool.hold_for_import(address, id, &first, soon()).ok());
  ASSERT_TRUE(pool.hold_for_import(address, id, &second, soon()).ok());
  EXPECT_EQ(first.pages, second.pages);
  const std::uint64_t frees = pool.stats(false).frees;

  ASSERT_TRUE(allocator->deallocate(address, 0, false).ok());
  EXPECT_TRUE(pool.owns(address)) << "freed while held: still the importers'";
  std::uintptr_t base = 0;
  std::size_t size = 0;
  EXPECT_FALSE(pool.find_containing(address, &base, &size)) << "freed, as far as the program can ask";
  EXPECT_FALSE(allocator->deallocate(address, 0, false).ok()) << "a second free is a double free";
  space::AddressSpace::SharedPages late;
  EXPECT_FALSE(pool.hold_for_import(address, id, &late, soon()).ok()) << "a freed block opens no more";
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

namespace tidepool {
namespace {

// A raw importer's connection to a channel, as another process makes it.
int connect_to(std::uint64_t channel) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  const std::string name = runtime::ipc::channel_name(channel);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, name.data(), name.size());
  EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address),
                      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size())),
            0);
  runtime::ipc::limit_waits(fd);
  return fd;
}

bool answered_within(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1;
}

// A peer that sends garbage (an unknown request, a short one, one with file
// descriptors attached, or a forged secret) is dropped or refused, and the
// channel goes on answering the next process. The importer here is this
// process's own, which is allowed as long as it comes to the channel from
// outside: the hook refuses an own handle earlier.
TEST(SharedBlocks, AChannelDropsGarbageAndGoesOnAnswering) {
  auto allocator = make_allocator();
  ASSERT_NE(allocator, nullptr);
  const driver::Api& api = testing::sim_driver().api();
  runtime::IpcExporter exporter(api);
  auto block = allocator->allocate(3 * MiB, 0, false);
  ASSERT_TRUE(block.ok());
  std::memset(reinterpret_cast<void*>(block.value()), 0x3c, 3 * MiB);
  auto made =
      exporter.export_block(allocator.get(), block.value(), 3 * MiB, buffer_id_of(allocator->pool(), block.value()));
  ASSERT_TRUE(made.ok());
  runtime::ipc::Handle handle;
  ASSERT_TRUE(runtime::ipc::decode(made.value(), &handle));

  const auto connect = [&] { return connect_to(handle.channel); };
  // Each is answered by the end of the connection, or a refusal.
  const std::uint64_t garbage[4] = {99, 1, 2, 3};
  int fd = connect();
  ASSERT_TRUE(runtime::ipc::send_message(fd, garbage, sizeof(garbage)));  // an unknown kind, the wrong size
  runtime::ipc::Reply reply;
  EXPECT_FALSE(runtime::ipc::receive_message(fd, &reply, sizeof(reply)));
  ::close(fd);
  fd = connect();
  const int attached[1] = {fd};
  runtime::ipc::Request request;
  request.kind = runtime::ipc::Request::open;
  request.export_id = handle.export_id;
  request.secret[0] = handle.secret[0];
  request.secret[1] = handle.secret[1] ^ 1;
  ASSERT_TRUE(runtime::ipc::send_message(fd, &request, sizeof(request), attached, 1));  // forged, with an fd
  ASSERT_TRUE(runtime::ipc::receive_message(fd, &reply, sizeof(reply)));
  EXPECT_EQ(reply.result, CUDA_ERROR_INVALID_VALUE);
  ::close(fd);
  EXPECT_EQ(exporter.counters().refused, 1u);
  EXPECT_EQ(exporter.counters().holds, 0u);

  // And then a proper open: the pages arrive, are mapped, and hold the block's bytes.
  runtime::IpcImporter importer(testing::sim_driver());
  ASSERT_EQ(api.ctxSetCurrent(allocator->context()), CUDA_SUCCESS);  // the importer maps for the current device
  CUdeviceptr opened = 0;
  ASSERT_EQ(importer.open(handle, 0, &opened), CUDA_SUCCESS);
  EXPECT_EQ(exporter.counters().holds, 1u);
  const auto* bytes = reinterpret_cast<const unsigned char*>(opened);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < 3 * MiB; ++i) wrong += bytes[i] != 0x3c ? 1 : 0;
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(importer.close(opened), CUDA_SUCCESS);
  EXPECT_EQ(exporter.counters().holds, 0u) << "the close waits for the exporter's word";
  EXPECT_TRUE(allocator->deallocate(block.value(), 0, false).ok());
}

}  // namespace
}  // namespace tidepool

namespace tidepool {
namespace {

// An open may wait for the owner's queued work; while two opens wait, the
// channel still answers a third importer at once (here a forged open, which
// is refused without waiting). Once the work is done both waiting opens
// get their pages.
TEST(SharedBlocks, AnOpenWaitingForTheOwnersWorkHoldsUpNoOtherImporter) {
  auto allocator = make_allocator();
  ASSERT_NE(allocator, nullptr);
  const driver::Api& api = testing::sim_driver().api();
  ASSERT_EQ(api.ctxSetCurrent(allocator->context()), CUDA_SUCCESS);
  // Long enough that a channel answering one request at a time could not
  // answer the third importer before the gate opens.
  runtime::IpcExporter exporter(api, std::chrono::seconds(60));
  CUstream writer = nullptr;
  ASSERT_EQ(api.streamCreate(&writer, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const auto key = reinterpret_cast<std::uintptr_t>(writer);
  auto block = allocator->allocate(3 * MiB, 0, false);
  ASSERT_TRUE(block.ok());
  // A stream-ordered free under a held write: an open must wait for it.
  testing::Gate gate;
  auto written = allocator->allocate(MiB, key, true);
  ASSERT_TRUE(written.ok());
  ASSERT_EQ(testing::launch_gated_write(writer, &gate, reinterpret_cast<int*>(written.value()), 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator->deallocate(written.value(), key, true).ok());
  auto made =
      exporter.export_block(allocator.get(), block.value(), 3 * MiB, buffer_id_of(allocator->pool(), block.value()));
  ASSERT_TRUE(made.ok());
  runtime::ipc::Handle handle;
  ASSERT_TRUE(runtime::ipc::decode(made.value(), &handle));
  runtime::ipc::Request open;
  open.kind = runtime::ipc::Request::open;
  open.export_id = handle.export_id;
  open.secret[0] = handle.secret[0];
  open.secret[1] = handle.secret[1];

  const int first = connect_to(handle.channel);
  const int second = connect_to(handle.channel);
  ASSERT_TRUE(runtime::ipc::send_message(first, &open, sizeof(open)));
  ASSERT_TRUE(runtime::ipc::send_message(second, &open, sizeof(open)));
  EXPECT_FALSE(answered_within(first, 100)) << "the open did not wait for the held write";
  EXPECT_FALSE(answered_within(second, 0));
  const int third = connect_to(handle.channel);
  runtime::ipc::Request forged = open;
  forged.secret[0] ^= 1;
  ASSERT_TRUE(runtime::ipc::send_message(third, &forged, sizeof(forged)));
  runtime::ipc::Reply reply;
  const bool third_answered =
      answered_within(third, 5000) && runtime::ipc::receive_message(third, &reply, sizeof(reply));
  bool gate_was_shut = false;
  {
    std::lock_guard<std::mutex> shut(gate.m);
    gate_was_shut = !gate.open;
  }
  EXPECT_TRUE(third_answered) << "the third importer waited behind the others";
  EXPECT_EQ(reply.result, CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(gate_was_shut);
  EXPECT_FALSE(answered_within(first, 0));
  EXPECT_FALSE(answered_within(second, 0));

  gate.release();
  for (const int fd : {first, second}) {
    runtime::ipc::Reply granted;
    ASSERT_TRUE(runtime::ipc::receive_message(fd, &granted, sizeof(granted)));
    EXPECT_EQ(granted.result, CUDA_SUCCESS);
    EXPECT_EQ(granted.block_bytes, 3 * MiB);
    std::uint32_t batch = 0;
    std::vector<int> fds;
    ASSERT_TRUE(runtime::ipc::receive_message(fd, &batch, sizeof(batch), &fds));
    EXPECT_EQ(fds.size(), granted.page_count);
    for (const int page : fds) ::close(page);
  }
  EXPECT_EQ(exporter.counters().opens, 2u);
  EXPECT_EQ(exporter.counters().refused, 1u);
  EXPECT_EQ(exporter.counters().holds, 2u);
  // Gone importers let go of their holds.
  for (const int fd : {first, second, third}) ::close(fd);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (exporter.counters().holds != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(exporter.counters().holds, 0u);
  EXPECT_TRUE(allocator->deallocate(block.value(), 0, false).ok());
  ASSERT_EQ(api.ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(api.streamDestroy(writer), CUDA_SUCCESS);
}

}  // namespace
}  // namespace tidepool
