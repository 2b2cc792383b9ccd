// The registry of placement policies: adding one is a line here.
#include <array>

#include "pool/placement/policy.hpp"

namespace tidepool::pool {

namespace {

struct Entry {
  std::string_view name;
  std::unique_ptr<PlacementPolicy> (*make)();
};

constexpr std::array<Entry, 6> kPolicies{{
    {"best_fit", &make_best_fit},
    {"first_fit", &make_first_fit},
    {"next_fit", &make_next_fit},
    {"worst_fit", &make_worst_fit},
    {"binned", &make_binned},
    {"two_ended", &make_two_ended},
}};

constexpr std::array<std::string_view, kPolicies.size()> kNames = [] {
  std::array<std::string_view, kPolicies.size()> names{};
  for (std::size_t i = 0; i < kPolicies.size(); ++i) names[i] = kPolicies[i].name;
  return names;
}();

}  // namespace

std::unique_ptr<PlacementPolicy> make_policy(std::string_view name) {
  for (const Entry& e : kPolicies) {
    if (e.name == name) return e.make();
  }
  return nullptr;
}

std::span<const std::string_view> policy_names() { return kNames; }

}  // namespace tidepool::pool
