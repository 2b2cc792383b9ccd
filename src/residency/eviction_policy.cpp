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

void FurthestNextUse::order(std::vector<RankedBlock>& candidates) const {
  keyed_.clear();
  for (const RankedBlock& c : candidates) keyed_.emplace_back(schedule_.next_use(c.buffer_id), c);
  std::stable_sort(keyed_.begin(), keyed_.end(), [](const auto& a, const auto& b) {
    const bool known_a = a.first != LaunchSchedule::kUnknown;
    const bool known_b = b.first != LaunchSchedule::kUnknown;
    if (known_a != known_b) return known_a;
    if (known_a) return a.first > b.first;
    return a.second.last_use < b.second.last_use;
  });
  for (std::size_t i = 0; i < candidates.size(); ++i) candidates[i] = keyed_[i].second;
}

std::unique_ptr<EvictionPolicy> make_eviction_policy(std::string_view name) {
  if (name == "lru") return std::make_unique<LeastRecentlyUsed>();
  if (name == "largest") return std::make_unique<LargestFirst>();
  return nullptr;
}

std::span<const std::string_view> eviction_policy_names() { return kNames; }

}  // namespace tidepool::residency
