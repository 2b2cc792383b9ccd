// Fuzz target: the pool (pool/pool.hpp, through runtime::Allocator) on the
// simulated driver, driven by operations decoded from the input and checked
// after every one against a reference model.
//
// The input's first two bytes pick a placement policy, free_barrier, whether
// the stream registry is known complete, and the device limit; each later
// operation takes an opcode byte and a few argument bytes (missing bytes read
// as zero, so every input decodes). Operations: allocate (sizes from 1 B to
// past the limit, on the legacy, per-thread or created streams, cudaMalloc or
// stream-ordered), free in every mode (cudaFree, on the allocating stream, on
// another stream), frees the pool must refuse (double free, interior, host
// and null pointers, a bogus stream), trim, a new device limit, destroying a
// stream, and a context synchronisation.
//
// After every operation: the live blocks the pool reports are exactly the
// model's, each backed and inside a segment; no two blocks overlap; the bytes
// stamped into every live block are intact (two blocks sharing a physical
// page would overwrite each other's); reserved bytes cover every page under
// a live block and stay within the limit unless a lowered limit left them
// above it (then they never grow); the counters match the model; a refused
// free changes nothing. An allocation the budget plainly has room for must
// not fail. At the end every block is freed, and tearing the allocator down
// gives the sim back every byte.
#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "driver/context.hpp"
#include "driver/driver.hpp"
#include "fuzz_check.hpp"
#include "pool/placement/policy.hpp"
#include "runtime/allocator.hpp"
#include "util/util.hpp"

namespace {

using tidepool::util::Error;
using tidepool::util::MiB;
namespace driver = tidepool::driver;
namespace pool = tidepool::pool;

constexpr const char* kPolicies[] = {"best_fit", "first_fit", "next_fit", "worst_fit", "binned", "two_ended"};
constexpr std::size_t kMaxOps = 200;  // keeps one input to milliseconds
constexpr std::size_t kStreams = 6;   // 0: legacy, 1: per-thread, 2..5: created
constexpr std::uintptr_t kBogusStream = 0xdead0000;

const driver::Driver& sim() {
  static const std::unique_ptr<driver::Driver> opened = [] {
    auto result = driver::Driver::open(TIDEPOOL_SIM_LIBRARY);
    FUZZ_CHECK(result.ok(), "cannot open the sim at %s", TIDEPOOL_SIM_LIBRARY);
    return std::move(result.value());
  }();
  return *opened;
}

std::size_t sim_device_bytes() {
  using Fn = std::size_t (*)();
  static const auto fn = reinterpret_cast<Fn>(::dlsym(sim().handle(), "tidepool_sim_device_bytes_in_use"));
  FUZZ_CHECK(fn != nullptr, "the sim lacks tidepool_sim_device_bytes_in_use");
  return fn();
}

// Reads the input; past its end every byte is zero.
class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  [[nodiscard]] bool empty() const { return pos_ >= size_; }
  std::uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

std::uint64_t stamp_value(std::uint64_t id, std::size_t offset) {
  std::uint64_t x = id * 0x9e3779b97f4a7c15ULL + offset;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  return x ^ (x >> 29);
}

struct Live {
  std::size_t size;
  std::uint64_t id;
  std::size_t stream;      // the slot it was allocated on
  std::size_t block_size;  // what the pool carved (rounded up), as its snapshot says
};

class Run {
 public:
  Run(const tidepool::runtime::AllocatorOptions& options, bool complete_registry) : api_(sim().api()) {
    auto created = tidepool::runtime::Allocator::create(sim(), options);
    FUZZ_CHECK(created.ok(), "Allocator::create: %s", created.status().message());
    allocator_ = std::move(created.value());
    allocator_->streams().set_complete(complete_registry);
    scope_ = std::make_unique<driver::ScopedContext>(api_, allocator_->context());
    page_ = allocator_->space().page_size();
    limit_ = options.device_limit;
    policy_ = pool::make_policy(options.pool.policy);
    small_size_ = options.pool.small_size;
  }

  ~Run() {
    for (std::size_t slot = 2; slot < kStreams; ++slot) destroy_stream(slot);
    FUZZ_CHECK(api_.ctxSynchronize() == CUDA_SUCCESS, "cuCtxSynchronize failed");
    scope_.reset();
    allocator_.reset();
  }

  void step(Bytes& in) {
    const std::uint8_t op = in.u8();
    before_ = stats();
    switch (op % 12) {
      case 0:
      case 1:
      case 2:
      case 3: allocate(in); break;
      case 4:
      case 5:
      case 6: free_live(in); break;
      case 7: free_refused(in); break;
      case 8: trim(); break;
      case 9: set_limit(in); break;
      case 10: destroy_stream(2 + in.u8() % (kStreams - 2)); break;
      default: FUZZ_CHECK(api_.ctxSynchronize() == CUDA_SUCCESS, "cuCtxSynchronize failed"); break;
    }
    check();
  }

  void free_everything() {
    while (!live_.empty()) {
      const std::uintptr_t address = live_.begin()->first;
      const auto freed = allocator_->deallocate(address, 0, false);
      FUZZ_CHECK(freed.ok(), "final free: %s", freed.message());
      forget(address);
    }
    check();
    const pool::PoolStats s = stats();
    FUZZ_CHECK(s.live_bytes == 0 && s.handed_out_bytes == 0 && s.live_blocks == 0, "blocks left after freeing all");
  }

 private:
  pool::PoolStats stats() const { return allocator_->pool().stats(); }

  std::uintptr_t stream_handle(std::size_t slot) {
    if (slot == 0) return 0;
    if (slot == 1) return reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD);
    if (streams_[slot] == nullptr) {
      // Even slots blocking, odd ones not: the fences treat the two apart.
      const unsigned flags = slot % 2 == 0 ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING;
      FUZZ_CHECK(api_.streamCreate(&streams_[slot], flags) == CUDA_SUCCESS, "cuStreamCreate failed");
      allocator_->stream_created(streams_[slot]);
    }
    return reinterpret_cast<std::uintptr_t>(streams_[slot]);
  }

  void destroy_stream(std::size_t slot) {
    if (streams_[slot] == nullptr) return;
    allocator_->stream_destroying(streams_[slot]);
    FUZZ_CHECK(api_.streamDestroy(streams_[slot]) == CUDA_SUCCESS, "cuStreamDestroy failed");
    streams_[slot] = nullptr;
  }

  // The block size the pool carves for `size`, as pool.cpp rounds it.
  std::size_t rounded(std::size_t size) const {
    const bool small = size <= small_size_;
    std::size_t r = tidepool::util::align_up(size, small ? 512 : 4096);
    return tidepool::util::align_up(policy_->round(r), 512);
  }

  // Distinct pages under live blocks (whole carved blocks: the pool backs
  // its rounding too): what the pool cannot give back.
  std::size_t live_pages() const {
    std::size_t pages = 0;
    std::uintptr_t counted_end = 0;  // one past the last page counted (blocks are in address order)
    for (const auto& [address, block] : live_) {
      std::uintptr_t first = address / page_;
      const std::uintptr_t end = (address + block.block_size - 1) / page_ + 1;
      first = std::max(first, counted_end);
      if (end > first) pages += end - first;
      counted_end = std::max(counted_end, end);
    }
    return pages;
  }

  void allocate(Bytes& in) {
    const std::uint8_t shape = in.u8();
    const std::uint16_t bits = in.u16();
    // Log-uniform from 1 B to 64 MiB: both arenas, every rounding, past the limit.
    const unsigned exponent = shape % 27;
    const std::size_t size = (std::size_t{1} << exponent) + (bits & ((std::size_t{1} << exponent) - 1));
    const std::size_t slot = (shape >> 5) % kStreams;
    const bool ordered = (bits >> 15) != 0 || slot != 0;
    const std::uintptr_t stream = ordered ? stream_handle(slot) : 0;
    const std::size_t pages_needed = (rounded(size) + page_ - 1) / page_ + 1;
    const bool plainly_fits = live_pages() + pages_needed <= limit_ / page_;

    auto result = allocator_->allocate(size, stream, ordered);
    if (!result.ok()) {
      FUZZ_CHECK(result.status().error() == Error::out_of_memory, "allocate(%zu): %s", size, result.status().message());
      FUZZ_CHECK(!plainly_fits, "allocate(%zu) failed with %zu of %zu pages live", size, live_pages(), limit_ / page_);
      ++ooms_;
      return;
    }
    const std::uintptr_t address = result.value();
    FUZZ_CHECK(address != 0, "allocate(%zu) returned null", size);
    auto after = live_.lower_bound(address);
    FUZZ_CHECK(after == live_.end() || address + size <= after->first, "0x%zx+%zu overlaps a live block",
               static_cast<std::size_t>(address), size);
    if (after != live_.begin()) {
      const auto before = std::prev(after);
      FUZZ_CHECK(before->first + before->second.size <= address, "0x%zx overlaps a live block",
                 static_cast<std::size_t>(address));
    }
    const Live block{size, ++next_id_, slot, rounded(size)};
    live_.emplace(address, block);
    freed_.erase(address);
    ++allocations_;
    live_bytes_ += size;
    stamp(address, block);
  }

  void free_live(Bytes& in) {
    if (live_.empty()) return;
    const std::uint8_t pick = in.u8();
    const std::uint8_t mode = in.u8();
    auto it = live_.begin();
    std::advance(it, pick % live_.size());
    const std::uintptr_t address = it->first;
    FUZZ_CHECK(stamp_intact(address, it->second), "block 0x%zx lost its bytes before its free",
               static_cast<std::size_t>(address));
    tidepool::util::Status freed;
    switch (mode % 4) {
      case 0: freed = allocator_->deallocate(address, 0, false); break;  // cudaFree
      case 1: {  // stream-ordered on the stream it was allocated on (if it still exists)
        const std::size_t slot = it->second.stream;
        const bool alive = slot < 2 || streams_[slot] != nullptr;
        freed = alive ? allocator_->deallocate(address, stream_handle(slot), true)
                      : allocator_->deallocate(address, 0, false);
        break;
      }
      default:  // stream-ordered on any stream, often another one
        freed = allocator_->deallocate(address, stream_handle((mode >> 2) % kStreams), true);
        break;
    }
    FUZZ_CHECK(freed.ok(), "free of a live block: %s", freed.message());
    forget(address);
  }

  void forget(std::uintptr_t address) {
    live_bytes_ -= live_.at(address).size;
    live_.erase(address);
    freed_.insert(address);
    ++frees_;
  }

  // A free the pool must refuse (or, for null, accept as a no-op); either
  // way nothing may change.
  void free_refused(Bytes& in) {
    const std::uint8_t kind = in.u8();
    const std::uint8_t pick = in.u8();
    const std::vector<pool::BlockView> layout = allocator_->pool().snapshot();
    std::uintptr_t address = 0;
    std::uintptr_t stream = 0;
    bool ordered = (kind & 0x80) != 0;
    Error expected = Error::invalid_value;
    int on_host = 0;
    switch (kind % 5) {
      case 0:  // double free
        if (freed_.empty()) return;
        address = *std::next(freed_.begin(), static_cast<long>(pick % freed_.size()));
        break;
      case 1: {  // inside a live block, not its start
        if (live_.empty()) return;
        const auto it = std::next(live_.begin(), static_cast<long>(pick % live_.size()));
        if (it->second.size < 2) return;
        address = it->first + 1 + pick % (it->second.size - 1);
        break;
      }
      case 2: address = reinterpret_cast<std::uintptr_t>(&on_host); break;
      case 3: expected = Error::ok; break;  // null: accepted, nothing to do
      default: {                            // a live block on a stream the driver does not know
        if (live_.empty()) return;
        address = std::next(live_.begin(), static_cast<long>(pick % live_.size()))->first;
        stream = kBogusStream + 0x100 * (pick % 7);
        ordered = true;
        expected = Error::invalid_handle;
        break;
      }
    }
    if (ordered && stream == 0) stream = stream_handle(pick % kStreams);
    const auto result = allocator_->deallocate(address, stream, ordered);
    FUZZ_CHECK(result.error() == expected, "free(0x%zx) of kind %d: error %d, expected %d (%s)",
               static_cast<std::size_t>(address), kind % 5, static_cast<int>(result.error()),
               static_cast<int>(expected), result.message());
    const std::vector<pool::BlockView> after = allocator_->pool().snapshot();
    FUZZ_CHECK(after.size() == layout.size(), "a refused free changed the block count");
    for (std::size_t i = 0; i < after.size(); ++i) {
      FUZZ_CHECK(after[i].address == layout[i].address && after[i].size == layout[i].size &&
                     after[i].requested == layout[i].requested,
                 "a refused free changed block %zu", i);
    }
    const pool::PoolStats s = stats();
    FUZZ_CHECK(s.frees == before_.frees && s.reserved_bytes == before_.reserved_bytes, "a refused free changed stats");
  }

  void trim() {
    const std::size_t released = allocator_->pool().trim();
    const pool::PoolStats s = stats();
    FUZZ_CHECK(s.reserved_bytes + released == before_.reserved_bytes,
               "trim released %zu bytes but reserved went from %zu to %zu", released,
               static_cast<std::size_t>(before_.reserved_bytes), static_cast<std::size_t>(s.reserved_bytes));
    FUZZ_CHECK(s.spare_bytes == 0, "trim left %zu spare bytes", static_cast<std::size_t>(s.spare_bytes));
    FUZZ_CHECK(s.deferred_bytes == 0, "trim left %zu deferred bytes", static_cast<std::size_t>(s.deferred_bytes));
  }

  // A lowered budget holds at once or is refused with the old one kept:
  // never a pool above the budget in force.
  void set_limit(Bytes& in) {
    const std::size_t wanted = (1 + in.u8() % 40) * page_;
    const tidepool::util::Status s = allocator_->pool().set_device_limit(wanted);
    if (s.ok()) {
      limit_ = wanted;
      return;
    }
    FUZZ_CHECK(s.error() == Error::out_of_memory && stats().reserved_bytes > wanted,
               "a budget of %zu B refused with %zu B reserved: %s", wanted,
               static_cast<std::size_t>(stats().reserved_bytes), s.message());
  }

  void stamp(std::uintptr_t address, const Live& block) {
    for_each_stamp(address, block, [&](std::size_t offset, std::size_t n) {
      const std::uint64_t v = stamp_value(block.id, offset);
      std::memcpy(reinterpret_cast<void*>(address + offset), &v, n);
    });
  }

  bool stamp_intact(std::uintptr_t address, const Live& block) const {
    bool intact = true;
    for_each_stamp(address, block, [&](std::size_t offset, std::size_t n) {
      const std::uint64_t v = stamp_value(block.id, offset);
      intact = intact && std::memcmp(reinterpret_cast<const void*>(address + offset), &v, n) == 0;
    });
    return intact;
  }

  // Up to 8 bytes at the block's start, its end and at every page boundary
  // within it (none overlapping): every physical page under the block
  // carries a mark.
  template <typename Fn>
  void for_each_stamp(std::uintptr_t address, const Live& block, Fn fn) const {
    const std::size_t head = std::min<std::size_t>(8, block.size);
    fn(0, head);
    for (std::uintptr_t p = tidepool::util::align_up(address + 8, page_); p + 16 <= address + block.size; p += page_) {
      fn(p - address, 8);
    }
    if (block.size >= 16) fn(block.size - 8, 8);
  }

  void check() {
    const pool::PoolStats s = stats();
    FUZZ_CHECK(s.allocations == allocations_ && s.frees == frees_, "counts %zu/%zu, model %zu/%zu",
               static_cast<std::size_t>(s.allocations), static_cast<std::size_t>(s.frees), allocations_, frees_);
    FUZZ_CHECK(s.live_bytes == live_bytes_ && s.live_blocks == live_.size(), "live %zu B in %zu, model %zu B in %zu",
               static_cast<std::size_t>(s.live_bytes), static_cast<std::size_t>(s.live_blocks), live_bytes_,
               live_.size());
    FUZZ_CHECK(s.ooms == ooms_, "ooms %zu, model %zu", static_cast<std::size_t>(s.ooms), ooms_);
    FUZZ_CHECK(s.reserved_bytes >= live_pages() * page_, "reserved %zu B under %zu live pages",
               static_cast<std::size_t>(s.reserved_bytes), live_pages());
    FUZZ_CHECK(s.reserved_bytes <= limit_, "reserved %zu B over a %zu B limit",
               static_cast<std::size_t>(s.reserved_bytes), limit_);
    FUZZ_CHECK(s.peak_reserved_bytes >= s.reserved_bytes, "peak below current");

    const std::vector<pool::BlockView> layout = allocator_->pool().snapshot();
    std::vector<pool::BlockView> sorted = layout;
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.address < b.address; });
    std::size_t live_seen = 0;
    std::uint64_t handed_out = 0;
    for (std::size_t i = 0; i < sorted.size(); ++i) {
      const pool::BlockView& b = sorted[i];
      FUZZ_CHECK(b.size > 0, "an empty block");
      if (i + 1 < sorted.size()) {
        FUZZ_CHECK(b.address + b.size <= sorted[i + 1].address, "blocks 0x%zx and 0x%zx overlap",
                   static_cast<std::size_t>(b.address), static_cast<std::size_t>(sorted[i + 1].address));
      }
      if (b.requested == 0) continue;
      ++live_seen;
      handed_out += b.size;
      const auto it = live_.find(b.address);
      FUZZ_CHECK(it != live_.end() && it->second.size == b.requested, "the pool has a live block 0x%zx the model lacks",
                 static_cast<std::size_t>(b.address));
      FUZZ_CHECK(b.size >= b.requested && b.backed, "live block 0x%zx: size %zu for %zu, backed %d",
                 static_cast<std::size_t>(b.address), b.size, b.requested, b.backed);
      it->second.block_size = b.size;
      FUZZ_CHECK(allocator_->pool().in_segments(b.address) && allocator_->pool().in_segments(b.address + b.size - 1),
                 "live block 0x%zx outside the segments", static_cast<std::size_t>(b.address));
      FUZZ_CHECK(stamp_intact(b.address, it->second), "live block 0x%zx lost its bytes",
                 static_cast<std::size_t>(b.address));
    }
    FUZZ_CHECK(live_seen == live_.size(), "the snapshot has %zu live blocks, the model %zu", live_seen, live_.size());
    FUZZ_CHECK(handed_out == s.handed_out_bytes, "handed out %zu, blocks sum to %zu",
               static_cast<std::size_t>(s.handed_out_bytes), static_cast<std::size_t>(handed_out));
    for (const auto& [address, block] : live_) {
      FUZZ_CHECK(allocator_->pool().owns(address), "the pool lost 0x%zx", static_cast<std::size_t>(address));
    }
  }

  const driver::Api& api_;
  std::unique_ptr<tidepool::runtime::Allocator> allocator_;
  std::unique_ptr<driver::ScopedContext> scope_;
  std::unique_ptr<pool::PlacementPolicy> policy_;
  std::size_t page_ = 0;
  std::size_t limit_ = 0;
  std::size_t small_size_ = 0;
  CUstream streams_[kStreams] = {};
  std::map<std::uintptr_t, Live> live_;
  std::set<std::uintptr_t> freed_;  // addresses freed and not handed out since
  std::uint64_t next_id_ = 0;
  std::size_t allocations_ = 0;
  std::size_t frees_ = 0;
  std::size_t ooms_ = 0;
  std::size_t live_bytes_ = 0;
  pool::PoolStats before_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Bytes in(data, size);
  const std::uint8_t setup = in.u8();
  const std::uint8_t limit_pages = in.u8();
  tidepool::runtime::AllocatorOptions options;
  options.pool.policy = kPolicies[setup % std::size(kPolicies)];
  options.pool.free_barrier = (setup & 0x10) != 0;
  options.device_limit = (2 + limit_pages % 31) * 2 * MiB;
  const std::size_t device_before = sim_device_bytes();
  {
    Run run(options, (setup & 0x20) != 0);
    for (std::size_t ops = 0; ops < kMaxOps && !in.empty(); ++ops) run.step(in);
    run.free_everything();
  }
  FUZZ_CHECK(sim_device_bytes() == device_before, "the allocator kept %zu device bytes after teardown",
             sim_device_bytes() - device_before);
  return 0;
}
