// EvictionPolicy: which live blocks give up their device pages first.
//
// The residency layer gathers the candidates (live blocks with pages on the
// device, none pinned by a hint or in use by the request being served) and
// a policy only orders them. Rules are compared by swapping the policy
// (TIDEPOOL_CONF's evict_policy), never by touching the mover.
//   lru      least recently used first: use is known from allocation order,
//            hints and prefetches (the default);
//   largest  most device pages first, least recently used among equals:
//            fewer, larger copies.
// prefetch:learn orders by FurthestNextUse once it knows the step; it is
// not a name TIDEPOOL_CONF can pick, since it needs the learned schedule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "residency/launch_schedule.hpp"

namespace tidepool::residency {

// A block as an EvictionPolicy ranks it (Residency builds it from the
// pool's pool::EvictionCandidate).
struct RankedBlock {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::uint64_t last_use = 0;  // a tick of the residency clock; larger is more recent
  std::size_t device_pages = 0;
  std::size_t source = 0;  // the caller's index for it
  std::uint64_t buffer_id = 0;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  [[nodiscard]] virtual std::string_view name() const = 0;
  // Sorts so that the first candidate is evicted first.
  virtual void order(std::vector<RankedBlock>& candidates) const = 0;
};

// Belady's rule on last step's order: the block a LaunchSchedule predicts
// to be used furthest ahead goes first; blocks it cannot place after those,
// least recently used first. Ties keep the caller's order.
class FurthestNextUse final : public EvictionPolicy {
 public:
  explicit FurthestNextUse(const LaunchSchedule& schedule) : schedule_(schedule) {}
  [[nodiscard]] std::string_view name() const override { return "next_use"; }
  void order(std::vector<RankedBlock>& candidates) const override;

 private:
  const LaunchSchedule& schedule_;
  mutable std::vector<std::pair<std::uint64_t, RankedBlock>> keyed_;  // scratch: (next use, block)
};

// Null for an unknown name.
std::unique_ptr<EvictionPolicy> make_eviction_policy(std::string_view name);
std::span<const std::string_view> eviction_policy_names();

}  // namespace tidepool::residency
