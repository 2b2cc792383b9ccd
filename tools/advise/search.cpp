// See search.hpp.
#include "search.hpp"

#include <algorithm>
#include <vector>

namespace tidepool::advise {

namespace {

class BatchSearch {
 public:
  BatchSearch(const SearchSettings& settings, const RunTrial& run, Answer* answer)
      : settings_(settings), run_(run), answer_(answer) {}

  void run() {
    const long without = largest(false, settings_.min_batch, 0);
    answer_->largest_without_eviction = without;
    if (stopped_) return finish();
    if (!settings_.eviction) {
      answer_->eviction_note = "not searched (--no-evict)";
      return finish();
    }
    if (without >= settings_.max_batch) {
      answer_->eviction_note = "not searched: the whole range fits without eviction";
      answer_->largest_with_eviction = without;
      return finish();
    }
    answer_->eviction_searched = true;
    answer_->largest_with_eviction = largest(true, std::max(settings_.min_batch, without + 1), without);
    if (eviction_unavailable_) {
      // Nothing was learnt of eviction: no answer is better than phase 1's again.
      answer_->eviction_searched = false;
      answer_->largest_with_eviction = 0;
    }
    finish();
  }

 private:
  enum class Verdict { fits, does_not_fit, stop };

  Verdict attempt(long batch, bool eviction) {
    const Trial& t = run_(batch, eviction);
    ran_.push_back(&t);
    if (t.outcome == Outcome::failed) {
      answer_->stopped_by = &t;
      answer_->interrupted = t.reason == "interrupted";
      stopped_ = true;
      return Verdict::stop;
    }
    if (eviction && t.report_found && t.eviction_state == "off") {
      answer_->eviction_note =
          "not available on this device (the report says it is off; it needs host-located VMM, CUDA 12.2+)";
      eviction_unavailable_ = true;
      return Verdict::stop;
    }
    return t.outcome == Outcome::fits ? Verdict::fits : Verdict::does_not_fit;
  }

  // The largest batch in [from, max] that fits, or `known_fit` (which is
  // below `from` and known to fit; 0 for none) when `from` does not.
  long largest(bool eviction, long from, long known_fit) {
    long fit = known_fit;
    long fail = 0;
    for (long batch = from;;) {
      const Verdict v = attempt(batch, eviction);
      if (v == Verdict::stop) return fit;
      if (v == Verdict::does_not_fit) {
        fail = batch;
        break;
      }
      fit = batch;
      if (batch >= settings_.max_batch) return fit;
      batch = batch > settings_.max_batch / 2 ? settings_.max_batch : batch * 2;
    }
    if (fit == 0) return 0;  // the lowest batch of the range does not fit
    while (fail - fit > 1) {
      const long mid = fit + (fail - fit) / 2;
      const Verdict v = attempt(mid, eviction);
      if (v == Verdict::stop) return fit;
      (v == Verdict::fits ? fit : fail) = mid;
    }
    return fit;
  }

  void finish() {
    for (const Trial* t : ran_) {
      if (t->outcome != Outcome::fits || t->samples_per_s <= 0) continue;
      if (answer_->best == nullptr || t->samples_per_s > answer_->best->samples_per_s) answer_->best = t;
    }
  }

  const SearchSettings& settings_;
  const RunTrial& run_;
  Answer* answer_;
  std::vector<const Trial*> ran_;
  bool stopped_ = false;
  bool eviction_unavailable_ = false;
};

}  // namespace

Answer search_batches(const SearchSettings& settings, const RunTrial& run) {
  Answer answer;
  BatchSearch(settings, run, &answer).run();
  return answer;
}

}  // namespace tidepool::advise
