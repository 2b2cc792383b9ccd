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
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace tidepool::residency {

// A block as an EvictionPolicy ranks it (Residency builds it from the
// pool's pool::EvictionCandidate).
struct RankedBlock {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::uint64_t last_use = 0;  // a tick of the residency clock; larger is more recent
  std::size_t device_pages = 0;
  std::size_t source = 0;  // the caller's index for it
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  [[nodiscard]] virtual std::string_view name() const = 0;
  // Sorts so that the first candidate is evicted first.
  virtual void order(std::vector<RankedBlock>& candidates) const = 0;
};

// Null for an unknown name.
std::unique_ptr<EvictionPolicy> make_eviction_policy(std::string_view name);
std::span<const std::string_view> eviction_policy_names();

}  // namespace tidepool::residency
