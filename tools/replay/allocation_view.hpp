// AllocationView: a trace seen as its allocations, whichever allocator serves
// them: who owns the memory (the trace's Owner column, runtime/trace_format.hpp)
// and each allocation's life, for the report's owners table and its
// per-allocation bands (memory_viz's active-memory timeline).
//
// Drawing every allocation of a long trace would make the page unusable, so
// the bands are the allocations that hold the most memory for the longest
// (bytes × time), up to a cap; the rest are summed into one series. The
// view holds the state at chosen times, each until the next (a step): evenly
// spaced ones, the moment of the live peak, and where each band begins and
// ends (so every band shows). The state at a time is the one after every
// event of that microsecond: where the peak's microsecond also frees, the
// view's tallest point is under the trace's peak by those frees.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "trace_reader.hpp"

namespace tidepool::replay {

struct OwnerUsage {
  std::string name;  // the Owner column's text; "" for allocations without one
  std::string kind;  // what a reader calls it: framework, cuBLAS, NCCL, ... (CallSites::owner_kind)
  std::uint64_t allocations = 0;
  std::uint64_t requested_bytes = 0;
  std::uint64_t peak_live_bytes = 0;     // the most it held at once
  std::uint64_t live_at_peak_bytes = 0;  // what it held at the trace's live peak
};

struct Band {
  std::uint64_t begin_us = 0;
  std::uint64_t end_us = 0;  // the trace's last time when never freed
  bool freed = false;
  std::uint64_t size = 0;
  std::uint32_t owner = 0;  // index into AllocationView::owners
  std::uint64_t line = 0;   // the allocate's line in the trace
};

struct AllocationView {
  std::vector<OwnerUsage> owners;  // index: the reader's owner index; [0] holds allocations without one
  bool named = false;              // some allocation has an owner
  std::uint64_t allocations = 0;
  std::uint64_t peak_live_bytes = 0;
  std::uint64_t peak_time_us = 0;
  std::vector<Band> bands;           // in allocation order
  std::uint64_t left_out = 0;        // allocations summed in `rest` rather than drawn
  std::vector<std::uint64_t> times;  // sample times, increasing, each holding until the next; empty: no allocations
  std::vector<std::uint64_t> rest;   // live bytes of the allocations left out, at each time
};

// `owners`: the reader's names (TraceReader::owners). Frees of pointers the
// trace never allocated are ignored (run_replay is the one to refuse them).
AllocationView view_allocations(const std::vector<TraceEvent>& events, const std::vector<std::string>& owners,
                                std::size_t max_bands = 400, std::size_t points = 400);

}  // namespace tidepool::replay
