// Compressor: compressed eviction (TIDEPOOL_CONF compress): which evicted
// pages travel and rest compressed, their streams, and making them readable
// again.
//
// A page is compressed on the device on its way out (PageCodec's kernels,
// writing the stream straight into the host store over the bus), so the bus
// carries and the host cache holds its compressed bytes only; it is
// unpacked into its device page on the way back. Each page is sampled first
// (the count kernel on one chunk in kSampleStride) and goes raw when no
// codec would save kMinSaving of it. compress:auto also stops sampling for a
// while after a batch in which no page paid, so dense data costs one sample
// in many batches, and after a batch in which every page paid counts the
// next one whole at once, so sparse data pays no separate sample.
//
// The rule that keeps every pointer working: a compressed page's pool
// address maps nothing (its bytes are only in the stream), so no access may
// reach it there; one that did would fault, loudly, where a mapped stand-in
// would have handed it wrong bytes and cost a pinned page. Compression is
// therefore on only where tidepool sees the accesses it lets through: under
// the preload with the launch scan bringing pages back (prefetch:launch or
// learn). Every launch, copy, set
// and graph launch that names a block, and an IPC export of it, first makes
// its compressed pages readable (PageMover::make_readable): back on the
// device, or unpacked into a raw host page where the budget has no room (a
// page is compressed only while the host cache's bound could hold every
// compressed page raw, so there is always room to unpack them). A
// launch whose parameters cannot be read may reach any block: the first one
// makes every compressed page raw and turns compression off for the rest of
// the run, as does a launch naming more blocks than a submission can pin
// (pool::Pins::kMax), since one of those could be evicted before it runs, and
// a graph with a node whose memory tidepool cannot read, or a scan cut
// short. A copy or set is taken to stay within the allocation its addresses
// name, as CUDA asks. Outside the rule: the entry points the preload does not
// hook (stream memory operations, copies to and from CUDA arrays,
// cuMemcpyBatchAsync) on pool memory.
//
// Under the pool's lock, as the rest of the residency layer, but for stats(),
// on() and compressed_now(). Like prefetch:learn, this trusts kernels to reach pool memory
// through their parameters, not through pointers stored in device memory.
#pragma once

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "driver/driver.hpp"
#include "residency/compressed_store.hpp"
#include "residency/host_cache.hpp"
#include "residency/page_codec.hpp"
#include "residency/transit.hpp"
#include "space/space.hpp"
#include "util/util.hpp"

namespace tidepool::residency {

enum class CompressMode { off, zero, automatic };

struct CompressStats {
  std::uint64_t compressed_pages = 0;    // evicted pages that went compressed
  std::uint64_t bytes_before = 0;        // their bytes
  std::uint64_t bytes_after = 0;         // their streams' bytes
  std::uint64_t raw_pages = 0;           // evicted pages sent raw because the sample said they would not pay
  std::uint64_t raw_bytes = 0;           // their bytes
  std::uint64_t unsampled_pages = 0;     // compress:auto: sent raw without a sample while sampling backed off
  std::uint64_t raw_for_room_pages = 0;  // sent raw: the host cache had no room to unpack them all later
  std::uint64_t expanded_pages = 0;      // unpacked into raw host pages to be read where they lie
  std::uint64_t expand_failures = 0;     // the host cache had no page for that: the page stayed compressed
  std::uint64_t compressed_now = 0;      // pages compressed on the host now
  double codec_ms = 0;                   // device time of the sample, count and pack kernels
  CompressedStoreStats store;
};

// A page whose bytes are a stream in the store; it has no handle: its pool
// address maps nothing.
struct CompressedPage : space::HostPage {
  CUdeviceptr stream = 0;
  std::uint32_t stream_bytes = 0;
  kernels::Codec codec = kernels::Codec::zero32;
};

class Compressor {
 public:
  static constexpr std::uint32_t kSampleStride = 16;     // one chunk in 16 (64 KiB in 2 MiB) is sampled
  static constexpr std::uint32_t kMinSavingEighths = 1;  // a stream must be at most 7/8 of the page

  static util::Result<std::unique_ptr<Compressor>> create(const driver::Driver& driver, CUcontext context, int device,
                                                          HostCache& cache, CompressMode mode);
  ~Compressor();
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;

  // The pages of `moves` (all on the device, no work touching them: the
  // caller's gate or synchronisation) go to the host on `stream`: the ones
  // that pay packed into streams, the rest copied into raw host pages taken
  // from the cache. Sets each move's `host` (left null where the cache had
  // no room) and waits for it all on the host; `wait_ms` gets the wait.
  // False when the device work failed: nothing is set then.
  bool to_host(std::vector<PageMove>& moves, CUstream stream, double* wait_ms);
  // Queues the bytes of `from` into device page `to` on `stream`: a copy
  // from a raw page, an unpack of a compressed one.
  bool fill(CUdeviceptr to, const space::HostPage& from, CUstream stream);
  // A page no longer mapped in the pool and no longer read: a compressed
  // one's stream goes back to the store, a raw one to the cache.
  void release(space::HostPage* page);
  // Makes compressed page `p` of `r` readable where it lies: unpacked on
  // `stream` into a raw host page that then takes its place. False (the page
  // still compressed) when the cache has no page or the unpack failed.
  bool expand(space::AddressSpace& space, space::Reservation& r, std::size_t p, CUstream stream);
  // No more compression (pages already compressed stay so until read).
  void turn_off() noexcept { on_.store(false, std::memory_order_relaxed); }
  [[nodiscard]] bool on() const noexcept { return on_.load(std::memory_order_relaxed); }
  // Where every compressed page is mapped now.
  [[nodiscard]] std::vector<space::PageLocation> compressed_locations() const;
  [[nodiscard]] std::size_t compressed_now() const noexcept { return compressed_now_.load(std::memory_order_relaxed); }
  [[nodiscard]] CompressStats stats() const;
  // stats(), unless its lock is still held at `deadline` (the exit path).
  bool try_stats(std::chrono::steady_clock::time_point deadline, CompressStats* out) const;

 private:
  Compressor(const driver::Driver& driver, CUcontext context, HostCache& cache, CompressMode mode,
             std::unique_ptr<PageCodec> codec, std::unique_ptr<CompressedStore> store);
  // One group of at most PageCodec::kBatch moves.
  bool to_host_group(PageMove* moves, std::size_t n, CUstream stream, double* wait_ms);
  bool wait(CUstream stream, double* wait_ms) const;
  void time_codec(CUevent start, CUevent end);

  const driver::Api& api_;
  CUcontext context_;
  HostCache& cache_;
  CompressMode mode_;
  std::unique_ptr<PageCodec> codec_;
  std::unique_ptr<CompressedStore> store_;
  CUevent codec_start_ = nullptr;
  CUevent codec_end_ = nullptr;
  std::atomic<bool> on_{true};
  std::size_t backoff_ = 0;  // compress:auto: groups left to send raw unsampled
  std::size_t backoff_next_ = 1;
  bool all_paid_ = false;  // compress:auto: every page of the last sampled batch paid
  std::atomic<std::size_t> compressed_now_{0};
  std::unordered_set<CompressedPage*> live_;  // every compressed page not yet released

  mutable std::mutex stats_lock_;  // stats_
  CompressStats stats_;
};

}  // namespace tidepool::residency
