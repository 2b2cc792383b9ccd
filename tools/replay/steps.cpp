// Step detection. The trace is read backwards: a training run ends with
// identical steps, so the reversed allocation sizes start with a "square"
// (a block followed by a copy of itself). One Z-array over the reversed
// sizes answers every question the detection asks in O(1) each:
// z[i] >= p  <=>  the p allocations ending i before the end equal the last p.
// That makes the whole detection linear in the trace, with no candidate
// search whose cost depends on how repetitive the sizes are.
#include "steps.hpp"

#include <algorithm>
#include <cstdint>

namespace tidepool::replay {

namespace {

// A period this short is a run of equal sizes (or a tiny loop), not a step.
constexpr std::size_t kMinPeriod = 8;

struct Allocations {
  std::vector<std::uint64_t> sizes;
  std::vector<std::size_t> event_of;  // allocation index -> event index
};

Allocations allocations_of(const std::vector<TraceEvent>& events) {
  Allocations a;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].action != TraceAction::allocate) continue;
    a.sizes.push_back(events[i].size);
    a.event_of.push_back(i);
  }
  return a;
}

// z[i] = the length of the longest common prefix of s and s[i..]; z[0] = |s|.
std::vector<std::size_t> z_array(const std::vector<std::uint64_t>& s) {
  const std::size_t n = s.size();
  std::vector<std::size_t> z(n, 0);
  if (n == 0) return z;
  z[0] = n;
  std::size_t left = 0;
  std::size_t right = 0;  // [left, right) is the rightmost match found so far
  for (std::size_t i = 1; i < n; ++i) {
    if (i < right) z[i] = std::min(right - i, z[i - left]);
    while (i + z[i] < n && s[z[i]] == s[i + z[i]]) ++z[i];
    if (i + z[i] > right) {
      left = i;
      right = i + z[i];
    }
  }
  return z;
}

std::vector<Step> whole(const std::vector<TraceEvent>& events) { return {Step{0, events.size()}}; }

// Steps beginning at the allocation indices `starts` (ascending); whatever
// precedes the first becomes an entry of its own.
std::vector<Step> steps_from(const std::vector<TraceEvent>& events, const Allocations& a,
                             std::vector<std::size_t> starts) {
  if (starts.front() != 0) starts.insert(starts.begin(), 0);
  std::vector<Step> steps;
  steps.reserve(starts.size());
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const std::size_t begin = i == 0 ? 0 : a.event_of[starts[i]];
    const std::size_t end = i + 1 < starts.size() ? a.event_of[starts[i + 1]] : events.size();
    steps.push_back(Step{begin, end});
  }
  return steps;
}

}  // namespace

std::vector<Step> detect_steps(const std::vector<TraceEvent>& events) {
  const Allocations a = allocations_of(events);
  const std::size_t n = a.sizes.size();
  // Also reject periods under 1% of the trace: a long trace's short tail loop
  // is not what a step means.
  const std::size_t min_period = std::max(kMinPeriod, (n + 99) / 100);
  if (n < 2 * min_period) return whole(events);

  std::vector<std::uint64_t> reversed(a.sizes.rbegin(), a.sizes.rend());
  const std::vector<std::size_t> z = z_array(reversed);

  // The largest p whose last 2p allocations are two equal halves.
  std::size_t p = n / 2;
  while (p >= min_period && z[p] < p) --p;
  if (p < min_period) return whole(events);

  // Four identical steps also form a square of two double steps: take the
  // smallest divisor of p that is a period of all 2p allocations.
  std::size_t period = p;
  for (std::size_t d = 1; d <= p / 2; ++d) {
    if (p % d == 0 && z[d] >= 2 * p - d) {
      period = d;
      break;
    }
  }
  if (period < min_period) return whole(events);  // a run of equal sizes, or a tiny loop

  // Walk back while the previous block repeats the last one.
  std::size_t count = 1;
  while ((count + 1) * period <= n && z[count * period] >= period) ++count;

  std::vector<std::size_t> starts;
  for (std::size_t k = count; k >= 1; --k) starts.push_back(n - k * period);
  return steps_from(events, a, std::move(starts));
}

std::vector<Step> split_steps(const std::vector<TraceEvent>& events, std::size_t count) {
  const Allocations a = allocations_of(events);
  const std::size_t n = a.sizes.size();
  if (count <= 1 || n == 0) return whole(events);
  count = std::min(count, n);
  const std::size_t per = n / count;
  std::vector<std::size_t> starts;
  for (std::size_t k = count; k >= 1; --k) starts.push_back(n - k * per);
  return steps_from(events, a, std::move(starts));
}

}  // namespace tidepool::replay
