// The out-of-memory message: what an allocation that failed for lack of
// memory (the budget or the device full) logs at warn, so that the user can
// tell what was asked, what the program holds, what tidepool holds, how much
// of that is free but unusable (fragmentation), and what to change.
//
// It is built only on the failure path, into fixed buffers with snprintf:
// the failure may be the host running out of memory too, and the message
// must not need any. Each line stays under spdlog's inline buffer (250
// bytes with the log pattern's prefix), so logging it allocates nothing
// either.
//
// Rate: a program that retries in a loop must not flood the log. The first
// kFullMessages failures of a device get the whole message; after that one
// short line at the 10th, 100th, 1000th, ... failure, with the count.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tidepool::runtime {

// The figures of one failure, a snapshot taken when it happened.
struct OomFigures {
  int device = 0;
  std::uint64_t requested = 0;
  const char* reason = "";  // the pool's status message
  std::uint64_t device_limit = 0;
  std::uint64_t device_total = 0;
  std::uint64_t live_bytes = 0;  // requested bytes of the program's live blocks
  std::uint64_t live_blocks = 0;
  std::uint64_t reserved_bytes = 0;  // physical device bytes tidepool holds
  std::uint64_t free_bytes = 0;      // of those, not under a live block
  std::uint64_t largest_free_block = 0;
  bool vmm = true;
  bool eviction = false;               // eviction is on for this device
  const char* eviction_off = nullptr;  // eviction was asked for but is unavailable: why
  std::uint64_t evicted_bytes = 0;     // bytes of live blocks on host pages now
  std::uint64_t host_cache_bytes = 0;  // pinned now
  std::uint64_t host_cache_limit = 0;
  std::uint64_t host_cache_full = 0;  // evictions cut short by host_cache
  std::uint64_t passthrough_allocations = 0;
  std::uint64_t failures = 0;  // out-of-memory failures of this device so far, this one included
};

inline constexpr std::uint64_t kFullMessages = 3;

enum class OomVerbosity { full, count, nothing };
// What the `nth` failure of a device logs (nth counts from 1).
OomVerbosity oom_verbosity(std::uint64_t nth) noexcept;

struct OomMessage {
  static constexpr std::size_t kMaxLines = 6;
  static constexpr std::size_t kLineBytes = 190;
  char lines[kMaxLines][kLineBytes] = {};
  std::size_t lengths[kMaxLines] = {};
  std::size_t count = 0;
};

// The full message (headline, pool, elsewhere, what to try in the settings
// and in the program, and at the last full one the rate), one log line each.
void format_oom_message(const OomFigures& f, OomMessage* out) noexcept;
// The short line of a later failure; returns its length.
std::size_t format_oom_count(const OomFigures& f, char* out, std::size_t capacity) noexcept;
// "1.50 GiB", "512 B" (as util::format_size writes them) into `out`, without allocating.
const char* format_bytes(std::uint64_t bytes, char* out, std::size_t capacity) noexcept;

// Logs the `f.failures`-th failure at warn as oom_verbosity() says. Never
// allocates; never throws.
void log_out_of_memory(const OomFigures& f) noexcept;

}  // namespace tidepool::runtime
