// next_fit: first fit that resumes from where the last placement ended and
// wraps to the base, spreading allocations across the pool.
#include "pool/placement/policy.hpp"

namespace tidepool::pool {
namespace {

class NextFit final : public PlacementPolicy {
 public:
  const char* name() const noexcept override { return "next_fit"; }
  Block* choose(const FreeIndex& index, const Request& r) noexcept override { return index.next_fit(r.size, cursor_); }
  void on_carved(const Block& allocated) noexcept override { cursor_ = allocated.address + allocated.size; }

 private:
  std::uintptr_t cursor_ = 0;
};

}  // namespace

std::unique_ptr<PlacementPolicy> make_next_fit() { return std::make_unique<NextFit>(); }

}  // namespace tidepool::pool
