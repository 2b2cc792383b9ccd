// Steps: where a training trace's repeated steps begin and end. Owns the
// detection of the repeating allocation sequence and the fixed split that
// `--steps N` asks for; knows nothing of targets or reports.
//
// Only `allocate` events count as allocations (a refused request is not part
// of the program's steady pattern). A step begins at its first allocation
// event; the frees before it belong to the step before.
#pragma once

#include <cstddef>
#include <vector>

#include "trace_reader.hpp"

namespace tidepool::replay {

struct Step {
  std::size_t begin;  // event indices [begin, end)
  std::size_t end;
};

// Steps found from the repeating sequence of allocation sizes. The first
// entry is everything before the first repeat ("setup" plus the first step
// when it differs); the last entry is the last training step. Returns one
// step covering all events when no repetition is found.
std::vector<Step> detect_steps(const std::vector<TraceEvent>& events);

// `count` steps of equal allocation count ending at the end of the trace
// (what --steps N says); the first entry then holds whatever precedes them,
// if anything. A count of 0 or 1, or a trace without allocations, gives one
// step covering all events; a count above the allocation count is lowered to
// it.
std::vector<Step> split_steps(const std::vector<TraceEvent>& events, std::size_t count);

}  // namespace tidepool::replay
