// GraphHolds: the pool blocks each instantiated CUDA graph's nodes name.
//
// A graph launch (cuGraphLaunch) passes no launch hook, so the residency
// rule (pool/page_mover.hpp) cannot see its work when it runs. Instead, at
// instantiation the graph's nodes are read: kernel nodes scanned as launches
// are, memcpy nodes' device source and destination, memset nodes'
// destination, and the nodes of child graphs, at any depth. Every block they
// name is held on the device (Pool::hold_for_graph: never evicted) for as
// long as the graph exists; each launch of the graph pins those blocks and
// brings back what is still on the host, as a launch does. A node's
// parameters changed in the instantiated graph (cuGraphExec*SetParams) add
// the blocks they name.
//
// Thread-safe. Lock order: this class's lock, then a pool's.
#pragma once

#include <cuda.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "pool/pool.hpp"

namespace tidepool::runtime {

class Allocator;

class GraphHolds {
 public:
  struct Held {
    Allocator* owner = nullptr;
    pool::LaunchedBlock block{};
  };
  // `exec` holds `held` (each already counted by its pool).
  void add(CUgraphExec exec, std::vector<Held> held);
  // `exec` is destroyed: what it held, for the pools to release.
  std::vector<Held> take(CUgraphExec exec);
  // Calls fn(held) for each block `exec` holds.
  template <typename F>
  void for_each(CUgraphExec exec, F&& fn) const {
    std::lock_guard<std::mutex> guard(lock_);
    auto it = held_.find(exec);
    if (it == held_.end()) return;
    for (const Held& h : it->second) fn(h);
  }

 private:
  mutable std::mutex lock_;
  std::unordered_map<CUgraphExec, std::vector<Held>> held_;
};

}  // namespace tidepool::runtime
