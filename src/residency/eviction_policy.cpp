// The eviction policies: each is an ordering of the candidates.
#include "residency/eviction_policy.hpp"

#include <algorithm>
#include <array>

namespace tidepool::residency {

namespace {

class LeastRecentlyUsed final : public EvictionPolicy {
 public:
  [[nodiscard]] std::string_view name() const override { return "lru"; }
  void order(std::vector<RankedBlock>& candidates) const override {
    std::sort(candidates.begin(), candidates.end(), [](const RankedBlock& a, const RankedBlock& b) {
      return a.last_use != b.last_use ? a.last_use < b.last_use : a.address < b.address;
    });
  }
};

class LargestFirst final : public EvictionPolicy {
 public:
  [[nodiscard]] std::string_view name() const override { return "largest"; }
  void order(std::vector<RankedBlock>& candidates) const override {
    std::sort(candidates.begin(), candidates.end(), [](const RankedBlock& a, const RankedBlock& b) {
      if (a.device_pages != b.device_pages) return a.device_pages > b.device_pages;
      return a.last_use != b.last_use ? a.last_use < b.last_use : a.address < b.address;
    });
  }
};

constexpr std::array<std::string_view, 2> kNames = {"lru", "largest"};

}  // namespace

std::unique_ptr<EvictionPolicy> make_eviction_policy(std::string_view name) {
  if (name == "lru") return std::make_unique<LeastRecentlyUsed>();
  if (name == "largest") return std::make_unique<LargestFirst>();
  return nullptr;
}

std::span<const std::string_view> eviction_policy_names() { return kNames; }

}  // namespace tidepool::residency
