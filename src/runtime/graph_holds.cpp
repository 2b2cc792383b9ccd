// See graph_holds.hpp.
#include "runtime/graph_holds.hpp"

#include <utility>

namespace tidepool::runtime {

void GraphHolds::add(CUgraphExec exec, std::vector<Held> held) {
  std::lock_guard<std::mutex> guard(lock_);
  auto& slot = held_[exec];
  slot.insert(slot.end(), held.begin(), held.end());
}

std::vector<GraphHolds::Held> GraphHolds::take(CUgraphExec exec) {
  std::lock_guard<std::mutex> guard(lock_);
  auto it = held_.find(exec);
  if (it == held_.end()) return {};
  std::vector<Held> held = std::move(it->second);
  held_.erase(it);
  return held;
}

}  // namespace tidepool::runtime
