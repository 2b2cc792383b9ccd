// LaunchSchedule: what prefetch:learn knows of the program's future, read
// from its past. Training repeats: one step launches the same kernels, in the
// same order, on blocks that play the same parts as last step's. The
// schedule records which pool blocks each launch named, finds the period of
// the launch sequence, and answers two questions from the last period:
//   - which live blocks the next K launches will use (to prefetch them);
//   - when a live block is used next (to evict the one needed last: Belady's
//     rule on last step's order).
//
// Period. A launch is known by its kernel and by how many launches ago each
// block it names was named before (the same kernel serves many layers; the
// ages tell them apart and repeat each step). A candidate period P comes from a
// run of kernels seen before, P launches ago; it is confirmed once the
// kernel sequence has matched itself P back for a whole period. Repeated
// layers inside a step confirm short periods that later break; the longest
// period still matching wins, so the step's period takes over once a whole
// step has repeated. Periods shorter than 8 launches are not steps (a run
// of one kernel repeats with period 1) and are never used.
//
// Blocks change between steps (activations are freed and allocated again),
// so a block of this step is tied to last step's block that held the same
// parameter of the same launch one period ago. Weights keep their block, and
// tie to themselves.
//
// Pure bookkeeping: no driver, no locks (the caller serialises), and memory
// bounded by its capacity in launches, fixed at construction.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tidepool::residency {

struct ScheduledBlock {
  std::uint64_t id = 0;  // the pool's buffer id: unique per allocation
  std::uintptr_t address = 0;
};

class LaunchSchedule {
 public:
  static constexpr std::size_t kMaxBlocksPerLaunch = 12;  // more are recorded as the first 12
  static constexpr std::uint64_t kUnknown = UINT64_MAX;

  // `capacity`: launches remembered; periods up to half of it are found.
  explicit LaunchSchedule(std::size_t capacity = 32768);

  // Records the next launch: its kernel and the blocks its parameters named.
  void record(std::uintptr_t kernel_address, const ScheduledBlock* blocks, std::size_t count);
  // Launches recorded so far; the next launch will have this index.
  [[nodiscard]] std::uint64_t launches() const noexcept { return next_; }
  // 0 until a period is confirmed.
  [[nodiscard]] std::uint64_t period() const noexcept { return period_; }
  // The periods being tried, each with the launches in a row it has
  // matched (a period is confirmed once its run reaches it): why a program
  // has no period, when it has none. Empty slots are {0, 0}.
  static constexpr std::size_t kCandidates = 8;
  [[nodiscard]] std::array<std::pair<std::uint64_t, std::uint64_t>, kCandidates> candidates() const noexcept {
    std::array<std::pair<std::uint64_t, std::uint64_t>, kCandidates> out{};
    for (std::size_t i = 0; i < kCandidates; ++i) out[i] = {candidates_[i].period, candidates_[i].run};
    return out;
  }
  // The index of the launch predicted to use `id` next; kUnknown without a
  // prediction (no period, a block not seen in a launch, a mismatch). A
  // block last step's counterpart never used again gets launches() + period.
  [[nodiscard]] std::uint64_t next_use(std::uint64_t id) const;
  // The blocks of this step predicted to be used by the next `ahead`
  // launches, nearest first, without repeats.
  void upcoming(std::size_t ahead, std::vector<ScheduledBlock>* out) const;
  // Pages a demand eviction asked for while the last launch was the latest:
  // recorded so that the next step can have them copied out ahead.
  void note_demand(std::size_t pages) noexcept;
  // Demand pages last period saw over the next `ahead` launches.
  [[nodiscard]] std::size_t predicted_demand(std::size_t ahead) const;
  // A freed block is no longer predicted.
  void forget(std::uint64_t id);

 private:
  struct Entry {
    ScheduledBlock block;
    std::uint64_t next = kUnknown;  // index of the block's next launch, once seen
  };
  struct Launch {
    std::uint64_t kernel = 0;  // the kernel with its blocks' ages (see record())
    std::uint32_t count = 0;
    std::uint32_t demand_pages = 0;
    std::array<Entry, kMaxBlocksPerLaunch> entries{};
  };
  struct Candidate {
    std::uint64_t period = 0;
    std::uint64_t run = 0;  // launches in a row whose kernel matched `period` back
  };
  struct LastSeen {
    std::uint64_t launch = 0;
    std::uint32_t slot = 0;
  };

  [[nodiscard]] bool remembered(std::uint64_t index) const noexcept {
    return index < next_ && next_ - index <= ring_.size();
  }
  const Launch& at(std::uint64_t index) const noexcept { return ring_[index % ring_.size()]; }
  Launch& at(std::uint64_t index) noexcept { return ring_[index % ring_.size()]; }
  void update_period(std::uintptr_t kernel);
  // This step's block in the part `past` played one period ago.
  [[nodiscard]] bool counterpart(const ScheduledBlock& past, ScheduledBlock* now) const;

  std::vector<Launch> ring_;
  std::uint64_t next_ = 0;
  std::uint64_t period_ = 0;
  static constexpr std::size_t kWindow = 8;  // kernels hashed to propose a period
  std::array<Candidate, kCandidates> candidates_{};
  std::uint64_t window_hash_ = 0;
  std::unordered_map<std::uint64_t, std::uint64_t> window_seen_;    // window hash -> launch index
  std::unordered_map<std::uint64_t, LastSeen> last_seen_;           // block id -> its latest use
  std::unordered_map<std::uint64_t, ScheduledBlock> counterparts_;  // last step's id -> this step's block
};

}  // namespace tidepool::residency
