// Search: which batch sizes to try, and what the trials answer. Owns the
// order of trials and nothing of how one is run (a function runs it), so
// the rules are tested without any program.
//
// Two phases over [min, max]:
//   1. without eviction, the largest batch that fits the budget: double from
//      min until a trial does not fit (or max is reached), then bisect
//      between the last that fit and the first that did not;
//   2. with eviction on (prefetch:learn), the same search starting above
//      phase 1's answer, for the largest batch that still trains (a trial
//      that times out does not).
// Every trial that fits counts for the most samples per second, in either
// phase. A trial that fails for a reason other than memory or time stops
// the search: nothing after it could be trusted.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "trial.hpp"

namespace tidepool::advise {

struct SearchSettings {
  long min_batch = 1;
  long max_batch = 1024;
  bool eviction = true;  // run phase 2
};

struct Answer {
  long largest_without_eviction = 0;  // 0: not even min fits
  long largest_with_eviction = 0;     // 0: none, or phase 2 not run
  bool eviction_searched = false;
  std::string eviction_note;          // why phase 2 did not run or stopped early, if it did
  const Trial* best = nullptr;        // the fitting trial with the most samples per second
  const Trial* stopped_by = nullptr;  // the failed trial that ended the search
  bool interrupted = false;
};

using RunTrial = std::function<const Trial&(long batch, bool eviction)>;

Answer search_batches(const SearchSettings& settings, const RunTrial& run);

// The learning rate for `batch` by the linear scaling rule.
inline double scaled_learning_rate(double base_lr, long base_batch, long batch) {
  return base_lr * static_cast<double>(batch) / static_cast<double>(base_batch);
}

}  // namespace tidepool::advise
