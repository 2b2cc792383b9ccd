// first_fit: the lowest-addressed free block that fits. Packs the pool
// towards its base, so the high end stays free in large runs.
#include "pool/placement/policy.hpp"

namespace tidepool::pool {
namespace {

class FirstFit final : public PlacementPolicy {
 public:
  const char* name() const noexcept override { return "first_fit"; }
  Block* choose(const FreeIndex& index, const Request& r) noexcept override { return index.first_fit(r.size); }
};

}  // namespace

std::unique_ptr<PlacementPolicy> make_first_fit() { return std::make_unique<FirstFit>(); }

}  // namespace tidepool::pool
