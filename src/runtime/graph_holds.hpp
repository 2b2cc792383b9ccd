// GraphHolds: the pool blocks each instantiated CUDA graph's kernels name.
//
// A graph launch (cuGraphLaunch) passes no launch hook, so the residency
// rule (pool/page_mover.hpp) cannot see its kernels when they run. Instead,
// at instantiation the graph's kernel nodes are scanned as launches are, and
// every block they name is held on the device (Pool::hold_for_graph: never
// evicted) for as long as the graph exists; each launch of the graph pins
// those blocks and brings back what is still on the host, as a launch does.
// Kernels in child graphs, and memcpy and memset nodes, are not scanned.
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
    pool::LaunchedBlock block;
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
