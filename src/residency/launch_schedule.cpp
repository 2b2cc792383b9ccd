// See launch_schedule.hpp.
#include "residency/launch_schedule.hpp"

#include <algorithm>

namespace tidepool::residency {

namespace {
// The maps are bounded: a program that never repeats must not grow them.
constexpr std::size_t kMaxMapEntries = std::size_t{1} << 16;
}  // namespace

LaunchSchedule::LaunchSchedule(std::size_t capacity) : ring_(std::max<std::size_t>(capacity, 2 * kWindow)) {}

void LaunchSchedule::record(std::uintptr_t kernel_address, const ScheduledBlock* blocks, std::size_t count) {
  const std::uint64_t n = next_;
  // A launch is known by its kernel and by how long ago each block it names
  // was last named (0: never). Programs launch the same kernel for many
  // layers; the ages tell the layers apart, and repeat from step to step.
  std::uint64_t kernel = kernel_address;
  for (std::size_t slot = 0; slot < std::min(count, kMaxBlocksPerLaunch); ++slot) {
    auto seen = last_seen_.find(blocks[slot].id);
    const std::uint64_t age = seen == last_seen_.end() ? 0 : n - seen->second.launch;
    kernel = (kernel ^ (age + 0x9e3779b97f4a7c15ULL + (kernel << 6) + (kernel >> 2))) * 0x100000001b3ULL;
  }
  update_period(kernel);
  const bool matched = period_ != 0 && n >= period_ && remembered(n - period_) && at(n - period_).kernel == kernel;
  Launch& launch = at(n);
  launch.kernel = kernel;
  launch.demand_pages = 0;
  launch.count = static_cast<std::uint32_t>(std::min(count, kMaxBlocksPerLaunch));
  for (std::uint32_t slot = 0; slot < launch.count; ++slot) {
    const ScheduledBlock& block = blocks[slot];
    launch.entries[slot] = Entry{block, kUnknown};
    auto [seen, inserted] = last_seen_.try_emplace(block.id, LastSeen{n, slot});
    if (!inserted) {
      if (remembered(seen->second.launch)) {
        Entry& previous = at(seen->second.launch).entries[seen->second.slot];
        if (previous.block.id == block.id && previous.next == kUnknown) previous.next = n;
      }
      seen->second = LastSeen{n, slot};
    }
    if (matched && slot < at(n - period_).count) {
      const ScheduledBlock& past = at(n - period_).entries[slot].block;
      if (past.id != block.id) counterparts_[past.id] = block;
    }
  }
  if (last_seen_.size() > kMaxMapEntries) last_seen_.clear();
  if (counterparts_.size() > kMaxMapEntries) counterparts_.clear();
  next_ = n + 1;
}

void LaunchSchedule::update_period(std::uintptr_t kernel) {
  const std::uint64_t n = next_;
  for (Candidate& c : candidates_) {
    if (c.period == 0) continue;
    c.run = n >= c.period && remembered(n - c.period) && at(n - c.period).kernel == kernel ? c.run + 1 : 0;
  }
  // The last kWindow kernels, this one included, propose the distance to
  // where they last appeared together.
  if (n + 1 >= kWindow) {
    std::uint64_t hash = kernel;
    for (std::uint64_t back = 1; back < kWindow; ++back) hash = hash * 0x100000001b3ULL ^ at(n - back).kernel;
    auto [it, inserted] = window_seen_.try_emplace(hash, n);
    if (!inserted) {
      const std::uint64_t proposed = n - it->second;
      it->second = n;
      const bool known =
          std::any_of(candidates_.begin(), candidates_.end(), [&](const Candidate& c) { return c.period == proposed; });
      if (!known && proposed >= kWindow && proposed <= ring_.size() / 2) {
        // Replace the weakest candidate, never the period in use.
        Candidate* weakest = nullptr;
        for (Candidate& c : candidates_) {
          if (c.period == period_ && period_ != 0) continue;
          if (weakest == nullptr || c.period == 0 || (weakest->period != 0 && c.run < weakest->run)) weakest = &c;
          if (c.period == 0) break;
        }
        // It has matched as far back as the kernels agree: counted now, a
        // period is confirmed as soon as a whole one has repeated.
        if (weakest != nullptr) {
          std::uint64_t run = 1;
          while (run < proposed && n >= proposed + run && remembered(n - proposed - run) &&
                 at(n - run).kernel == at(n - proposed - run).kernel) {
            ++run;
          }
          *weakest = Candidate{proposed, run};
        }
      }
    }
    if (window_seen_.size() > kMaxMapEntries) window_seen_.clear();
  }
  // The longest period that has matched for a whole period and still does;
  // a shorter one that has matched at least as long divides it (two steps
  // repeat as surely as one), and is taken instead.
  const Candidate* best = nullptr;
  for (const Candidate& c : candidates_) {
    if (c.period != 0 && c.run >= c.period && (best == nullptr || c.period > best->period)) best = &c;
  }
  if (best == nullptr) return;  // keep the period in use through a launch that broke the pattern
  for (const Candidate& c : candidates_) {
    if (c.period != 0 && c.period < best->period && best->period % c.period == 0 && c.run >= best->run) best = &c;
  }
  period_ = best->period;
}

bool LaunchSchedule::counterpart(const ScheduledBlock& past, ScheduledBlock* now) const {
  auto it = counterparts_.find(past.id);
  *now = it != counterparts_.end() ? it->second : past;
  return true;
}

std::uint64_t LaunchSchedule::next_use(std::uint64_t id) const {
  auto it = last_seen_.find(id);
  if (it == last_seen_.end() || period_ == 0) return kUnknown;
  const std::uint64_t latest = it->second.launch;
  const std::uint32_t slot = it->second.slot;
  if (latest < period_ || !remembered(latest) || !remembered(latest - period_)) return kUnknown;
  const Launch& past = at(latest - period_);
  if (past.kernel != at(latest).kernel || slot >= past.count) return kUnknown;
  const std::uint64_t next = past.entries[slot].next;
  // Not used again within what has been seen since: later than anything
  // this step will ask for.
  if (next == kUnknown) return next_ + period_;
  return next + period_;
}

void LaunchSchedule::upcoming(std::size_t ahead, std::vector<ScheduledBlock>* out) const {
  out->clear();
  if (period_ == 0) return;
  for (std::uint64_t index = next_; index < next_ + ahead; ++index) {
    if (index < period_) continue;
    const std::uint64_t past = index - period_;
    if (!remembered(past)) continue;
    const Launch& launch = at(past);
    for (std::uint32_t slot = 0; slot < launch.count; ++slot) {
      ScheduledBlock now;
      if (!counterpart(launch.entries[slot].block, &now)) continue;
      const bool repeated =
          std::any_of(out->begin(), out->end(), [&](const ScheduledBlock& b) { return b.id == now.id; });
      if (!repeated) out->push_back(now);
    }
  }
}

void LaunchSchedule::note_demand(std::size_t pages) noexcept {
  if (next_ == 0) return;
  Launch& launch = at(next_ - 1);
  launch.demand_pages = static_cast<std::uint32_t>(std::min<std::size_t>(launch.demand_pages + pages, UINT32_MAX));
}

std::size_t LaunchSchedule::predicted_demand(std::size_t ahead) const {
  if (period_ == 0) return 0;
  // Demand is noted against the launch before it: the one now latest
  // stands where next_ - 1 stood one period ago.
  std::size_t pages = 0;
  for (std::uint64_t index = next_ == 0 ? 0 : next_ - 1; index + 1 < next_ + ahead; ++index) {
    if (index < period_ || !remembered(index - period_)) continue;
    pages += at(index - period_).demand_pages;
  }
  return pages;
}

void LaunchSchedule::forget(std::uint64_t id) { last_seen_.erase(id); }

}  // namespace tidepool::residency
