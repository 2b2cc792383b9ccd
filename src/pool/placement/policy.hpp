// PlacementPolicy: which free block a request is cut from, and from which end.
//
// A policy is one small class in one file (placement/<name>.cpp) plus one line
// in placement/registry.cpp. It sees only the arena's FreeIndex and the request;
// splitting, backing pages and stream safety stay in the pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "pool/block.hpp"
#include "pool/free_index.hpp"

namespace tidepool::pool {

enum class CarveEnd { low, high };

struct Request {
  std::size_t size;  // already rounded to the arena's alignment
  std::uintptr_t stream;
  bool small;              // from the small arena
  std::uint64_t sequence;  // how many requests came before this one
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  [[nodiscard]] virtual const char* name() const noexcept = 0;
  // The size actually carved for a request of `size` bytes (size classes).
  [[nodiscard]] virtual std::size_t round(std::size_t size) const noexcept { return size; }
  // A free block with size >= r.size, or null when none fits.
  virtual Block* choose(const FreeIndex& index, const Request& r) noexcept = 0;
  [[nodiscard]] virtual CarveEnd carve_end(const Block& /*chosen*/, const Request& /*r*/) const noexcept {
    return CarveEnd::low;
  }
  virtual void on_carved(const Block& /*allocated*/) noexcept {}
};

// Null for an unknown name.
std::unique_ptr<PlacementPolicy> make_policy(std::string_view name);
// Every registered policy, the default first.
std::span<const std::string_view> policy_names();

// One factory per policy file; the registry lists them.
std::unique_ptr<PlacementPolicy> make_best_fit();
std::unique_ptr<PlacementPolicy> make_first_fit();
std::unique_ptr<PlacementPolicy> make_next_fit();
std::unique_ptr<PlacementPolicy> make_worst_fit();
std::unique_ptr<PlacementPolicy> make_binned();
std::unique_ptr<PlacementPolicy> make_two_ended();

}  // namespace tidepool::pool
