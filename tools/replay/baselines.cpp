// Baselines: what other allocators would have reserved on the same trace,
// emulated on a virtual address line from their documented rules (no memory
// is touched).
//
// pytorch_rules — PyTorch's caching allocator with default settings: sizes
//   round up to 512 B; requests <= 1 MiB use the small pool, cut from 2 MiB
//   segments; 1-10 MiB requests get 20 MiB segments; larger ones a segment
//   rounded up to 2 MiB. Best fit by (size, address) within the pool. A small
//   block is split when at least 512 B would remain, a large one when more
//   than 1 MiB would. Free blocks coalesce within their segment. Segments are
//   never released, except that under a budget an out-of-memory first frees
//   every wholly free cached segment and retries, as PyTorch does.
// rmm_pool — RMM's pool_memory_resource: sizes round up to 256 B; one
//   address-ordered, coalescing free list; best fit; the pool starts at
//   256 MiB (or the request, if larger) and grows by allocating a new segment
//   of max(request, current pool size), doubling it. Never shrinks.
// cuda_malloc — one driver allocation per request, no pooling: requests under
//   1 MiB are packed by the driver at 512 B granularity, larger ones occupy
//   whole 2 MiB pages.
//
// Driver calls: a baseline's segment allocations and releases are reported
// as creates and releases, one each; nothing else is emulated (cudaFree's
// implicit device synchronisation on hardware included).
//
// Sizes come from traces, which may be hostile: a request that cannot be
// rounded, or segments that would pass the end of the emulated address line
// (kAddressEnd), fail the allocation as out of memory. Every byte counted is
// then a byte of that line, so no counter can wrap.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "target.hpp"

namespace tidepool::replay {

namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kAddressStart = 1ULL << 40;
constexpr std::uint64_t kAddressEnd = 1ULL << 62;

// `x` rounded up to a multiple of `m`; false when that does not fit.
bool round_up(std::uint64_t x, std::uint64_t m, std::uint64_t* out) {
  if (x > kAddressEnd) return false;
  *out = (x + m - 1) / m * m;
  return true;
}

// Takes `bytes` (plus `gap`) of the address line at `*next`; false when the
// line has no room left.
bool take_addresses(std::uint64_t* next, std::uint64_t bytes, std::uint64_t gap, std::uint64_t* base) {
  if (bytes > kAddressEnd - *next || gap > kAddressEnd - *next - bytes) return false;
  *base = *next;
  *next += bytes + gap;
  return true;
}

DriverCalls as_driver_calls(const Counters& c) {
  DriverCalls calls;
  calls.creates = c.maps;
  calls.releases = c.unmaps;
  return calls;
}

struct Rules {
  std::string name;
  std::uint64_t rounding = 512;
  bool two_pools = true;                     // small (<= 1 MiB) and large pools
  std::uint64_t small_split_min = 512;       // split a small block when remaining >= this
  std::uint64_t large_split_min = kMiB + 1;  // split a large block when remaining >= this
  bool doubling = false;                     // rmm growth
  std::uint64_t initial_pool = 0;            // rmm's first segment
};

class EmulatedPool final : public Target {
 public:
  EmulatedPool(Rules rules, std::uint64_t budget) : rules_(std::move(rules)), budget_(budget) {}

  std::string name() const override { return rules_.name; }

  bool allocate(std::uint64_t size, std::uint64_t /*stream*/, std::uint64_t* address) override {
    std::uint64_t rounded = 0;
    if (!round_up(std::max<std::uint64_t>(size, 1), rules_.rounding, &rounded)) return false;
    const int pool = rules_.two_pools && rounded <= kMiB ? 0 : 1;
    auto chosen = find(pool, rounded);
    if (!chosen) {
      if (!grow(pool, rounded) && !(budget_ != 0 && release_free_segments() && grow(pool, rounded))) return false;
      chosen = find(pool, rounded);
      if (!chosen) return false;
    }
    Block& b = blocks_.at(*chosen);
    free_[pool].erase({b.size, *chosen});
    const std::uint64_t remaining = b.size - rounded;
    const std::uint64_t split_min = pool == 0 ? rules_.small_split_min : rules_.large_split_min;
    if (remaining >= split_min && remaining > 0) {
      Block rest{remaining, b.segment, false};
      b.size = rounded;
      blocks_[*chosen + rounded] = rest;
      free_[pool].insert({remaining, *chosen + rounded});
    }
    b.used = true;
    b.requested = size;
    counters_.live_bytes += size;
    counters_.handed_out_bytes += b.size;
    *address = *chosen;
    return true;
  }

  void free(std::uint64_t address, std::uint64_t /*stream*/) override {
    auto it = blocks_.find(address);
    if (it == blocks_.end() || !it->second.used) return;
    counters_.live_bytes -= it->second.requested;
    counters_.handed_out_bytes -= it->second.size;
    it->second.used = false;
    const int pool = pool_of(it->second.segment);
    // Coalesce with the next and previous blocks of the same segment.
    auto next = std::next(it);
    if (next != blocks_.end() && !next->second.used && next->second.segment == it->second.segment) {
      free_[pool].erase({next->second.size, next->first});
      it->second.size += next->second.size;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (!prev->second.used && prev->second.segment == it->second.segment) {
        free_[pool].erase({prev->second.size, prev->first});
        prev->second.size += it->second.size;
        blocks_.erase(it);
        it = prev;
      }
    }
    free_[pool].insert({it->second.size, it->first});
  }

  Counters counters() const override { return counters_; }
  DriverCalls driver_calls() const override { return as_driver_calls(counters_); }

  Fragmentation fragmentation() const override {
    Fragmentation f;
    for (const auto& pool : free_) {
      if (!pool.empty()) f.largest_free_block = std::max(f.largest_free_block, pool.rbegin()->first);
    }
    f.free_bytes = counters_.reserved_bytes - counters_.handed_out_bytes;
    return f;
  }

  std::vector<Span> layout() const override {
    std::vector<Span> spans;
    std::uint64_t offset = 0;
    for (const auto& [address, b] : blocks_) {
      spans.push_back(Span{offset, b.size, b.used});
      offset += b.size;
    }
    return spans;
  }

 private:
  struct Block {
    std::uint64_t size = 0;
    std::uint64_t segment = 0;  // base address of the segment
    bool used = false;
    std::uint64_t requested = 0;
  };

  std::optional<std::uint64_t> find(int pool, std::uint64_t size) const {
    auto it = free_[pool].lower_bound({size, 0});
    if (it == free_[pool].end()) return std::nullopt;
    return it->second;
  }

  std::uint64_t segment_size(int pool, std::uint64_t size) const {
    if (rules_.doubling) {
      const std::uint64_t pool_size = counters_.reserved_bytes;
      return pool_size == 0 ? std::max(rules_.initial_pool, size) : std::max(size, pool_size);
    }
    if (pool == 0) return 2 * kMiB;
    if (size < 10 * kMiB) return 20 * kMiB;
    std::uint64_t bytes = 0;
    return round_up(size, 2 * kMiB, &bytes) ? bytes : kAddressEnd;  // too large: fails in grow()
  }

  bool grow(int pool, std::uint64_t size) {
    const std::uint64_t bytes = segment_size(pool, size);
    if (budget_ != 0 && (bytes > budget_ || counters_.reserved_bytes > budget_ - bytes)) return false;
    std::uint64_t base = 0;
    if (!take_addresses(&next_address_, bytes, 2 * kMiB, &base)) return false;  // a gap: segments never coalesce
    blocks_[base] = Block{bytes, base, false, 0};
    segments_[base] = Segment{bytes, pool};
    free_[pool].insert({bytes, base});
    counters_.reserved_bytes += bytes;
    counters_.maps++;
    return true;
  }

  bool release_free_segments() {
    bool released = false;
    for (auto it = segments_.begin(); it != segments_.end();) {
      auto b = blocks_.find(it->first);
      if (b != blocks_.end() && !b->second.used && b->second.size == it->second.size) {
        free_[it->second.pool].erase({b->second.size, b->first});
        blocks_.erase(b);
        counters_.reserved_bytes -= it->second.size;
        counters_.unmaps++;
        it = segments_.erase(it);
        released = true;
      } else {
        ++it;
      }
    }
    return released;
  }

  int pool_of(std::uint64_t segment) const { return segments_.at(segment).pool; }

  struct Segment {
    std::uint64_t size;
    int pool;
  };

  Rules rules_;
  std::uint64_t budget_;
  std::map<std::uint64_t, Block> blocks_;
  std::map<std::uint64_t, Segment> segments_;
  std::set<std::pair<std::uint64_t, std::uint64_t>> free_[2];  // (size, address)
  std::uint64_t next_address_ = kAddressStart;
  Counters counters_;
};

class CudaMalloc final : public Target {
 public:
  explicit CudaMalloc(std::uint64_t budget) : budget_(budget) {}
  std::string name() const override { return "cuda_malloc"; }
  bool allocate(std::uint64_t size, std::uint64_t /*stream*/, std::uint64_t* address) override {
    std::uint64_t cost = 0;
    if (!round_up(std::max<std::uint64_t>(size, 1), size < kMiB ? 512 : 2 * kMiB, &cost)) return false;
    if (budget_ != 0 && (cost > budget_ || counters_.reserved_bytes > budget_ - cost)) return false;
    std::uint64_t base = 0;
    if (!take_addresses(&next_address_, cost, 0, &base)) return false;
    live_[base] = {size, cost};
    counters_.live_bytes += size;
    counters_.handed_out_bytes += cost;
    counters_.reserved_bytes += cost;
    counters_.maps++;
    *address = base;
    return true;
  }
  void free(std::uint64_t address, std::uint64_t /*stream*/) override {
    auto it = live_.find(address);
    if (it == live_.end()) return;
    counters_.live_bytes -= it->second.first;
    counters_.handed_out_bytes -= it->second.second;
    counters_.reserved_bytes -= it->second.second;
    counters_.unmaps++;
    live_.erase(it);
  }
  Counters counters() const override { return counters_; }
  DriverCalls driver_calls() const override { return as_driver_calls(counters_); }
  Fragmentation fragmentation() const override { return {}; }  // nothing is cached
  std::vector<Span> layout() const override {
    std::vector<Span> spans;
    std::uint64_t offset = 0;
    for (const auto& [address, sizes] : live_) {
      spans.push_back(Span{offset, sizes.second, true});
      offset += sizes.second;
    }
    return spans;
  }

 private:
  std::uint64_t budget_;
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> live_;  // address -> (requested, cost)
  std::uint64_t next_address_ = kAddressStart;
  Counters counters_;
};

}  // namespace

std::unique_ptr<Target> make_pytorch_rules_target(std::uint64_t budget) {
  Rules rules;
  rules.name = "pytorch_rules";
  return std::make_unique<EmulatedPool>(rules, budget);
}

std::unique_ptr<Target> make_rmm_pool_target(std::uint64_t budget) {
  Rules rules;
  rules.name = "rmm_pool";
  rules.rounding = 256;
  rules.two_pools = false;
  rules.large_split_min = 1;
  rules.small_split_min = 1;
  rules.doubling = true;
  rules.initial_pool = 256 * kMiB;
  return std::make_unique<EmulatedPool>(rules, budget);
}

std::unique_ptr<Target> make_cuda_malloc_target(std::uint64_t budget) { return std::make_unique<CudaMalloc>(budget); }

}  // namespace tidepool::replay
