// Transit: moves pool pages between the device and the host cache, with
// every stream of the context ordered around the move.
//
// A page cannot change its physical memory while the device touches it: a
// kernel would read an unmapped address between the unmap and the map, and a
// write landing after the copy would be lost. So each move is a gate
// (order::StreamRegistry::device_gate) on the device:
//   to_host:   all work queued so far  ->  copy device -> host cache on the
//              device-to-host stream  ->  the gate stream waits for a flag
//              the host writes  ->  every stream's later work.
//              The host waits for the copy, remaps the pages (device page
//              out, host page in, same address), then writes the flag.
//   to_device: all work queued so far  ->  the gate stream waits for the
//              flag  ->  copy host cache -> device on the host-to-device
//              stream  ->  every stream's later work.
//              The host waits only for the work before the gate, remaps,
//              and writes the flag; the copy runs on the device after it.
// Nothing any stream queues after the gate runs before the flag, so the host
// remaps pages no work is touching, and no host thread waits for work queued
// after it. The flag lives in mapped pinned memory (cuMemHostAlloc with
// DEVICEMAP) and the wait is cuStreamWaitValue32. Every path writes the flag,
// failures included: a gate left shut would stop the device for good.
//
// Without a whole gate (no complete stream registry, a capture, a failed
// call, a driver without stream memory operations) the move falls back to a
// context synchronisation and host-waited copies. That orders everything
// queued before the move, but not work another host thread queues during it:
// such a program should run under the preload, whose registry is complete.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "driver/driver.hpp"
#include "order/order.hpp"
#include "space/space.hpp"
#include "util/util.hpp"

namespace tidepool::residency {

class Compressor;

struct PageMove {
  space::Reservation* reservation = nullptr;
  std::size_t page = 0;
  // to_host: the destination, or null for the compressor to choose (a
  // compressed or a raw page); to_device: set to the page released.
  space::HostPage* host = nullptr;
  bool moved = false;
};

struct TransitStats {
  std::uint64_t gates = 0;      // moves ordered by a device gate
  std::uint64_t fallbacks = 0;  // moves ordered by a context synchronisation
  std::uint64_t tracked = 0;    // moves ordered by the launch scan's knowledge of use (prefetch:learn)
  std::uint64_t to_host_bytes = 0;
  std::uint64_t to_device_bytes = 0;
  double to_host_ms = 0;  // device time of the copies, where events could time them
  double to_device_ms = 0;
  std::uint64_t timed_to_host_bytes = 0;
  std::uint64_t timed_to_device_bytes = 0;
  std::uint64_t failed_moves = 0;  // a copy or remap failed; the page stayed where it was
  // Host time the moves took from the thread making them: waiting for the
  // device (the work before a gate, a gate's copies out, a precopy being
  // committed, a fallback's synchronisation), and remapping pages.
  double wait_ms = 0;
  double remap_ms = 0;
};

class Transit {
 public:
  static util::Result<std::unique_ptr<Transit>> create(const driver::Driver& driver, CUcontext context,
                                                       order::StreamRegistry& streams, std::size_t page_size);
  ~Transit();
  Transit(const Transit&) = delete;
  Transit& operator=(const Transit&) = delete;

  // Each move whose page reached the host (or the device) is marked `moved`.
  // Called under the pool's lock (the space is the pool's); returns how many
  // moved. to_device: host pages released are handed to `release` once the
  // copies reading them have finished (see reap()).
  // `fills`: the copies of tracked bring-backs (tracked_to_device's `done`)
  // that may still be writing some of these pages; no gate orders the
  // transit's own streams, so the copies out wait for them.
  std::size_t to_host(space::AddressSpace& space, std::vector<PageMove>& moves, const std::vector<CUevent>& fills = {});
  std::size_t to_device(space::AddressSpace& space, std::vector<PageMove>& moves);
  // The most pages one gate brings back: their fills wait behind the gate's
  // flag in a stream's queue, which on a GPU holds about a thousand
  // commands before the host blocks (a compressed page's fill may take a
  // few), and the host opens the flag only after it has queued them all.
  static constexpr std::size_t kMaxPagesPerGate = 256;
  // Tracked moves (prefetch:learn): no gate, so nothing stalls; each block
  // is ordered by what the launch scan knows of its use (see residency.hpp).
  // precopy_to_host: copies the pages to their host pages after all work
  // queued so far (a device barrier, no flag), leaving them mapped where
  // they are (never pages a tracked bring-back is still filling: the caller
  // skips those); false when it could not be queued (`done` is then null and
  // the host pages are the caller's again once reap() returns nothing for
  // them: they were handed to release_after()).
  bool precopy_to_host(std::vector<PageMove>& moves, CUevent* start, CUevent* done);
  // Remaps pages whose precopy `done` finished (the host waits for it);
  // the events go back to the transit. Returns how many moved.
  std::size_t commit_to_host(space::AddressSpace& space, std::vector<PageMove>& moves, CUevent start, CUevent done);
  // Remaps host pages back to device pages now and copies their bytes in on
  // the host-to-device stream; `done` (null when nothing moved) completes
  // with the copies, and stays valid until reap() has seen it finish.
  std::size_t tracked_to_device(space::AddressSpace& space, std::vector<PageMove>& moves, CUevent* done);
  // Host pages go back to the cache once `done` (and, with it, `start`) has
  // finished; the transit owns both events from here.
  void release_after(CUevent start, CUevent done, std::vector<space::HostPage*> pages);
  [[nodiscard]] bool finished(CUevent done) const { return api_.eventQuery(done) == CUDA_SUCCESS; }
  void wait_on(CUevent done, std::uintptr_t stream) const {
    driver::ScopedContext scope(api_, context_);
    (void)api_.streamWaitEvent(reinterpret_cast<CUstream>(stream), done, 0);
  }
  void wait_for(CUevent done) const { (void)api_.eventSynchronize(done); }
  // The host waits for every fill queued so far (none queued since the
  // last wait: no driver call).
  void wait_for_copies_in() {
    if (fills_waited_ == fills_queued_) return;
    const std::uint64_t target = fills_queued_;
    driver::ScopedContext scope(api_, context_);
    if (api_.streamSynchronize(to_device_stream_) == CUDA_SUCCESS) fills_waited_ = target;
  }
  // Host pages whose outgoing copies have finished, ready for the cache.
  // `wait`: wait for all of them.
  std::vector<space::HostPage*> reap(bool wait);
  [[nodiscard]] const TransitStats& stats() const noexcept { return stats_; }
  // Compressed eviction: to_host moves whose `host` is null go through the
  // compressor, and every copy in reads a page through it. Set once, before
  // the first move.
  void set_compressor(Compressor* compressor) noexcept { compressor_ = compressor; }
  [[nodiscard]] CUstream to_device_stream() const noexcept { return to_device_stream_; }
  // Its three streams (copies out, copies in, gates), for a fence of the
  // context's work: no stream registry lists them.
  [[nodiscard]] std::vector<CUstream> streams() const { return {to_host_stream_, to_device_stream_, gate_stream_}; }

 private:
  Transit(const driver::Driver& driver, CUcontext context, order::StreamRegistry& streams, std::size_t page_size);
  // The gated move; false when no whole gate could be made (the flag is
  // open again and nothing was remapped).
  bool gated_to_host(space::AddressSpace& space, std::vector<PageMove>& moves, const std::vector<CUevent>& fills);
  bool gated_to_device(space::AddressSpace& space, std::vector<PageMove>& moves);
  // The fallbacks' ordering: false during a capture (a synchronisation
  // would invalidate it) or when it failed.
  bool synchronize_context();
  void fallback_to_host(space::AddressSpace& space, std::vector<PageMove>& moves);
  // Maps each page's host page in place of its device page (the copy out
  // has finished), marking those moved.
  void remap_to_host(space::AddressSpace& space, std::vector<PageMove>& moves);
  void fallback_to_device(space::AddressSpace& space, std::vector<PageMove>& moves);
  // After a failed gate: the compressed pages of `moves` already remapped
  // (their stream pages in `released`, in order) are unpacked with the host
  // waiting, or go back to their streams.
  void settle_compressed(space::AddressSpace& space, std::vector<PageMove>& moves,
                         std::vector<space::HostPage*> released);
  void open(std::uint32_t generation) noexcept;
  // Inside device_gate's hook: joins the legacy stream's work (`joined_`)
  // and makes the gate stream wait for it and then for the flag of
  // `generation`. Sets `waiting` once the flag wait is queued (the flag must
  // then be opened) and names the gate stream in `ends_on`.
  bool shut(std::uint32_t generation, bool* waiting, CUstream* ends_on);
  // Remaps each page to a device page now and queues the copy of its bytes
  // from its host page on the host-to-device stream; a page whose copy
  // cannot be queued is mapped back to its host page. Returns the host pages
  // released, which the copies still read.
  std::vector<space::HostPage*> remap_and_fill(space::AddressSpace& space, std::vector<PageMove>& moves);
  // Counts the moves made (into `moved_bytes`) and failed; returns those made.
  std::size_t tally(const std::vector<PageMove>& moves, std::uint64_t* moved_bytes);
  std::uint32_t next_generation() noexcept;
  // Opens the gate's flag when it goes out of scope (or at open_now()) if
  // the legacy stream was made to wait for it.
  struct OpenOnExit {
    OpenOnExit(Transit* t, std::uint32_t g, bool* w) noexcept : transit(t), generation(g), waiting(w) {}
    Transit* transit;
    std::uint32_t generation;
    bool* waiting;
    void open_now() noexcept {
      if (*waiting) transit->open(generation);
      *waiting = false;
    }
    ~OpenOnExit() { open_now(); }
    OpenOnExit(const OpenOnExit&) = delete;
    OpenOnExit& operator=(const OpenOnExit&) = delete;
  };
  void time_copies(CUevent start, CUevent end, std::uint64_t bytes, bool to_host);
  // Queues the bytes of host page `from` into device page `to`.
  bool fill(CUdeviceptr to, const space::HostPage& from, CUstream stream);
  // Fills queued on the host-to-device stream, and how many of them
  // wait_for_copies_in last saw finish (under the pool's lock, as every call).
  std::uint64_t fills_queued_ = 0;
  std::uint64_t fills_waited_ = 0;
  // Whether a to_host batch goes through the compressor (its moves' `host` is null).
  [[nodiscard]] bool compressing(const std::vector<PageMove>& moves) const noexcept {
    return compressor_ != nullptr && !moves.empty() && moves.front().host == nullptr;
  }

  struct PendingRelease {
    CUevent start = nullptr;  // when the copies began (timing), and when they finished
    CUevent done = nullptr;
    std::uint64_t bytes = 0;
    std::vector<space::HostPage*> pages;
  };

  const driver::Api& api_;
  CUcontext context_;
  order::StreamRegistry& registry_;
  std::size_t page_size_;
  CUstream to_host_stream_ = nullptr;
  CUstream to_device_stream_ = nullptr;
  // Where a gate waits for its flag, and the gate ends (device_gate's
  // `ends_on`): never the legacy stream, whose queue another thread may
  // fill behind a wait only the host can end.
  CUstream gate_stream_ = nullptr;
  volatile std::uint32_t* flag_ = nullptr;  // host view, written by the host only
  CUdeviceptr flag_device_ = 0;             // device view, waited on
  std::uint32_t generation_ = 0;
  CUevent joined_ = nullptr;
  CUevent copied_ = nullptr;
  std::vector<PendingRelease> pending_;
  order::EventCache events_{api_, CU_EVENT_DEFAULT};  // with timing: copies are timed
  Compressor* compressor_ = nullptr;
  TransitStats stats_;
};

}  // namespace tidepool::residency
