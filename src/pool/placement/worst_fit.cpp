// worst_fit: always cut from the largest free block, so what remains is as
// large as possible. A baseline for comparison, rarely the best choice.
#include "pool/placement/policy.hpp"

namespace tidepool::pool {
namespace {

class WorstFit final : public PlacementPolicy {
 public:
  const char* name() const noexcept override { return "worst_fit"; }
  Block* choose(const FreeIndex& index, const Request& r) noexcept override { return index.worst_fit(r.size); }
};

}  // namespace

std::unique_ptr<PlacementPolicy> make_worst_fit() { return std::make_unique<WorstFit>(); }

}  // namespace tidepool::pool
