// best_fit (the default): the smallest free block that fits, the lowest
// address among equals. Leaves the largest blocks whole for large requests.
#include "pool/placement/policy.hpp"

namespace tidepool::pool {
namespace {

class BestFit final : public PlacementPolicy {
 public:
  const char* name() const noexcept override { return "best_fit"; }
  Block* choose(const FreeIndex& index, const Request& r) noexcept override { return index.best_fit(r.size); }
};

}  // namespace

std::unique_ptr<PlacementPolicy> make_best_fit() { return std::make_unique<BestFit>(); }

}  // namespace tidepool::pool
