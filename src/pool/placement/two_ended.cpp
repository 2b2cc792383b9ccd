// two_ended: vDNN++-style placement. Long-lived and small blocks grow from
// the low end of the pool and large transient blocks from the high end, so
// that the large ones, which are worth evicting, free up contiguous pages.
// The rule: a request of 4 MiB or more in the large arena is "large", and is
// cut from the high end of the highest-addressed block that fits; everything
// else is first fit, cut from the low end. The very first requests of a run
// (the parameters, usually) therefore settle at the base.
#include "pool/placement/policy.hpp"
#include "util/util.hpp"

namespace tidepool::pool {
namespace {

class TwoEnded final : public PlacementPolicy {
 public:
  const char* name() const noexcept override { return "two_ended"; }
  Block* choose(const FreeIndex& index, const Request& r) noexcept override {
    return is_large(r) ? index.last_fit(r.size) : index.first_fit(r.size);
  }
  CarveEnd carve_end(const Block& /*chosen*/, const Request& r) const noexcept override {
    return is_large(r) ? CarveEnd::high : CarveEnd::low;
  }

 private:
  static constexpr std::size_t kLarge = 4 * util::MiB;
  static bool is_large(const Request& r) noexcept { return !r.small && r.size >= kLarge; }
};

}  // namespace

std::unique_ptr<PlacementPolicy> make_two_ended() { return std::make_unique<TwoEnded>(); }

}  // namespace tidepool::pool
