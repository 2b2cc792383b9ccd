// binned: size classes in the style of jemalloc and RMM's binning resource.
// Sizes up to 4 KiB round to multiples of 512 B; above that each power of
// two is split into four classes (2^k, 1.25, 1.5, 1.75 x 2^k), which bounds
// internal waste at 25%. A request is carved at its class size from the
// best-fitting block, so freed blocks are reused whole by the same class.
#include <bit>

#include "pool/placement/policy.hpp"

namespace tidepool::pool {
namespace {

class Binned final : public PlacementPolicy {
 public:
  const char* name() const noexcept override { return "binned"; }
  std::size_t round(std::size_t size) const noexcept override {
    if (size <= 4096) return (size + 511) & ~std::size_t{511};
    const unsigned top = static_cast<unsigned>(std::bit_width(size - 1)) - 1;  // 2^top < size <= 2^(top+1)
    const std::size_t step = std::size_t{1} << (top - 2);                      // a quarter of 2^top
    return ((size + step - 1) / step) * step;
  }
  Block* choose(const FreeIndex& index, const Request& r) noexcept override { return index.best_fit(r.size); }
};

}  // namespace

std::unique_ptr<PlacementPolicy> make_binned() { return std::make_unique<Binned>(); }

}  // namespace tidepool::pool
