// TraceRecorder: records every allocation event of a run as RMM logging CSV
// (`trace:PATH`), off the hot path; gzipped when PATH ends in .gz, one gzip
// member per write (gzip_members.hpp).
//
// Allocating threads push fixed-size events into a bounded lock-free ring
// (one atomic fetch-add, a clock read and a slot write: no allocation, no
// I/O, no lock). A writer thread drains the ring every few milliseconds,
// formats lines into a buffer of its own and writes them with write(2), so
// the file trails the program by at most one drain interval and a crash
// loses at most that much. flush() drains synchronously; finish() flushes,
// stops the writer and makes every later event write through, so frees made
// during static destruction still reach the file. When the ring is full,
// producers help drain it rather than drop an event: a trace with a lost
// allocation could not be replayed.
//
// Order: sequence numbers come from one atomic counter, so the file's order
// is consistent with happens-before. Callers record a free before the block
// goes back to the pool and an allocation after it leaves it, so an address
// is never seen allocated twice without a free in between.
//
// Fork: a child process inherits the ring but not the writer thread; the
// recorder turns itself off in the child so the parent's file is not
// written twice.
//
// Owner: each event carries the CallSites tag of who asked (call_sites.hpp).
// The writer thread names new tags' libraries before it takes the drain lock
// (naming asks the dynamic loader, whose lock a thread inside dlopen holds
// while its constructors may allocate), and the names are kept. A producer
// that drains (a full ring, or after finish()) uses the names known so far:
// an event of a tag not yet named goes without its owner.
//
// Locks: `drain_lock_` serialises draining and writing (the writer thread,
// flush(), and producers only when the ring is full or after finish());
// `wake_lock_` only pairs with `wake_`. Neither is held while the other is
// taken, and no pool lock is ever held while recording.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "runtime/trace_format.hpp"
#include "util/util.hpp"

namespace tidepool::runtime {

class CallSites;
class GzipMembers;

class TraceRecorder {
 public:
  // Creates (truncates) `path`, writes the CSV header and starts the writer.
  // With `continue_from` (an earlier load of the library in this process
  // recorded to the same path: reload_marker.hpp), appends instead, and
  // times count from that earlier start. An error is io_error with the
  // reason as the message.
  // `call_sites` (may be null; outlives the recorder) names the owner tags
  // record() is given.
  static util::Result<std::unique_ptr<TraceRecorder>> open(
      const std::string& path, std::optional<std::chrono::steady_clock::time_point> continue_from = std::nullopt,
      const CallSites* call_sites = nullptr);
  // The instant event times count from.
  [[nodiscard]] std::chrono::steady_clock::time_point start() const noexcept { return start_; }
  // Flushes, stops the writer and closes the file.
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // `owner`: the CallSites tag of who asked (0: not known); the Owner
  // column names its library.
  void record(TraceAction action, std::uintptr_t pointer, std::size_t size, std::uintptr_t stream,
              std::uint16_t owner = 0) noexcept;
  // Writes everything recorded so far to the file.
  void flush() noexcept;
  // For exit: flushes, stops the writer thread; later events write through.
  void finish() noexcept;

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  // Events recorded (claimed by producers) so far.
  [[nodiscard]] std::uint64_t recorded() const noexcept { return head_.load(std::memory_order_relaxed); }
  // Events written to the file so far.
  [[nodiscard]] std::uint64_t written() const noexcept { return written_.load(std::memory_order_relaxed); }

  static constexpr std::size_t kCapacity = std::size_t{1} << 16;  // events in the ring

 private:
  // One cache line per event, so producers on different slots never share one.
  struct alignas(64) Slot {
    // Whose turn the slot is: equal to a sequence number `s` when free for
    // the producer of `s`, `s + 1` once that event is written, and
    // `s + kCapacity` once the writer has consumed it.
    std::atomic<std::uint64_t> turn{0};
    // The event as recorded: TraceEvent less what only a reader fills in.
    std::uint64_t thread = 0;
    std::uint64_t time_us = 0;
    std::uint64_t pointer = 0;
    std::uint64_t size = 0;
    std::uint64_t stream = 0;
    std::uint16_t owner = 0;
    TraceAction action = TraceAction::allocate;
  };
  static_assert(sizeof(Slot) == 64, "one event, one cache line");
  static constexpr std::size_t kBufferBytes = std::size_t{64} << 10;
  static constexpr std::chrono::milliseconds kFinishWait{1000};  // finish() waits no longer for the drain lock

  TraceRecorder(int fd, std::string path, std::chrono::steady_clock::time_point start,
                std::unique_ptr<GzipMembers> gzip, const CallSites* call_sites);
  // Writes `text` to the file: as it is, or as one gzip member.
  bool write_text(std::string_view text) noexcept;
  static Slot* map_slots();
  void run();
  // False when the trace was abandoned meanwhile (the event is dropped).
  bool wait_for_slot(Slot& slot, std::uint64_t sequence) noexcept;
  // Under drain_lock_: moves every published event, in order, to the file.
  // `until`: keep waiting for events claimed before it to be published.
  // `stop_at_unnamed`: stop before an event whose owner tag has no name yet
  // and return true (the writer names it and drains again); otherwise such
  // an event goes without its owner.
  bool drain_locked(std::uint64_t until, bool stop_at_unnamed = false) noexcept;
  void write_out() noexcept;
  // Names the tags given since the last call (never under drain_lock_);
  // with `give_up_at`, only if the naming lock is had by then (exit).
  void name_new_owners(std::optional<std::chrono::steady_clock::time_point> give_up_at = std::nullopt) noexcept;
  // Writes what is recorded; names new owners first unless `may_name` is
  // false (a producer's write-through after finish()).
  void flush(bool may_name) noexcept;
  [[nodiscard]] bool active() const noexcept;

  const int fd_;
  const std::string path_;
  const std::unique_ptr<GzipMembers> gzip_;  // null for a plain trace
  const std::uint64_t fork_generation_;      // the process generation this recorder belongs to
  const std::chrono::steady_clock::time_point start_;
  // The ring is mapped, not taken from malloc: 4 MiB from the heap per
  // recorder fragments it for good when a plugin is loaded and unloaded again
  // and again (an aligned request never fits the hole the last one left).
  struct SlotsUnmap {
    void operator()(Slot* slots) const noexcept;
  };
  std::unique_ptr<Slot[], SlotsUnmap> slots_;
  std::atomic<std::uint64_t> head_{0};     // next sequence to claim
  std::atomic<std::uint64_t> written_{0};  // events handed to write(2)
  std::atomic<bool> write_through_{false};
  // finish() could not take the drain lock (a signal-interrupted holder):
  // the trace has ended, and record() drops events rather than wait.
  std::atomic<bool> abandoned_{false};

  // Under drain_lock_.
  std::mutex drain_lock_;
  std::uint64_t tail_ = 0;          // next sequence to write
  std::uint64_t last_time_us_ = 0;  // the file's times never go backwards
  std::unique_ptr<char[]> buffer_;
  std::size_t buffered_ = 0;           // bytes in buffer_
  std::uint64_t buffered_events_ = 0;  // events in buffer_
  bool write_failed_ = false;

  // Owner names by tag: entries below named_ are set and never change;
  // name_new_owners() (under naming_lock_) fills the next ones, then
  // publishes them by raising named_.
  const CallSites* const call_sites_;
  std::vector<std::string> owner_names_;
  std::atomic<std::size_t> named_{1};  // tag 0 is ""
  std::mutex naming_lock_;

  std::mutex wake_lock_;
  std::condition_variable wake_;
  bool stop_ = false;  // under wake_lock_
  std::thread writer_;
};

}  // namespace tidepool::runtime
