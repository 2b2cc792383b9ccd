// What a reader of a replay's results must not miss about one trace, for the
// table and the HTML report alike: which tidepool policy did best (the ★),
// baselines that did better still, and where a sample trace came from.
#pragma once

#include <string>
#include <vector>

#include "replay.hpp"

namespace tidepool::replay {

// pytorch_rules, rmm_pool, cuda_malloc: other allocators emulated for
// reference, never starred while a tidepool policy ran.
bool is_baseline(const std::string& policy);

// The best of one trace's runs: a tidepool policy over a baseline, then the
// fewest failed allocations, then the highest utilization, then the least
// reserved; the first of equals.
std::size_t best_run(const std::vector<const Result*>& runs);

// The baselines that beat `best` (a tidepool policy): no more failed
// allocations and a higher utilization. A reader comparing allocators must
// see them, not find them in the table.
std::vector<const Result*> baselines_ahead(const std::vector<const Result*>& runs, const Result& best);

// For one of the sample traces shipped in data/traces (known by name and
// event count), how it was recorded and what that leaves out; empty for any
// other trace.
std::string sample_origin(const Result& result);

// The owners of a trace's memory (its Owner column), the most at the live
// peak first; those without allocations left out.
std::vector<const OwnerUsage*> owners_at_peak(const AllocationView& view);
// "at the live peak: libtorch_cuda.so (framework) 812.0 MiB, ..."; empty
// when the trace names no owner.
std::string owners_line(const AllocationView& view);

}  // namespace tidepool::replay
