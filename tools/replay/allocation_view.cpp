// AllocationView: one pass over the events for the owners and the
// allocations' lives, then the bands chosen and the rest sampled.
#include "allocation_view.hpp"

#include <algorithm>
#include <unordered_map>

#include "runtime/runtime.hpp"

namespace tidepool::replay {

AllocationView view_allocations(const std::vector<TraceEvent>& events, const std::vector<std::string>& owners,
                                std::size_t max_bands, std::size_t points) {
  AllocationView view;
  view.owners.resize(std::max<std::size_t>(owners.size(), 1));
  for (std::size_t i = 0; i < view.owners.size(); ++i) {
    OwnerUsage& o = view.owners[i];
    o.name = i < owners.size() ? owners[i] : std::string();
    o.kind = o.name.empty() ? "not named" : std::string(runtime::CallSites::owner_kind(o.name, false));
  }
  if (events.empty()) return view;
  // Threads' clocks may be a little out of order, and RMM's clock wraps at
  // midnight: the trace spans its earliest to its latest time.
  std::uint64_t first = events.front().time_us;
  std::uint64_t last = first;
  for (const TraceEvent& e : events) {
    first = std::min(first, e.time_us);
    last = std::max(last, e.time_us);
  }

  std::vector<Band> lives;
  std::unordered_map<std::uint64_t, std::size_t> live_index;  // pointer -> lives
  std::vector<std::uint64_t> owner_live(view.owners.size(), 0);
  std::uint64_t live = 0;
  for (const TraceEvent& e : events) {
    if (e.action == TraceAction::allocate) {
      if (e.size == 0) continue;
      const std::uint32_t owner = e.owner < view.owners.size() ? e.owner : 0;
      const auto [it, inserted] = live_index.emplace(e.pointer, lives.size());
      if (!inserted) continue;  // allocated twice: run_replay refuses the trace
      lives.push_back({e.time_us, 0, false, e.size, owner, e.line});
      OwnerUsage& o = view.owners[owner];
      o.allocations++;
      o.requested_bytes += e.size;
      owner_live[owner] += e.size;
      o.peak_live_bytes = std::max(o.peak_live_bytes, owner_live[owner]);
      view.named = view.named || owner != 0;
      live += e.size;
      if (live > view.peak_live_bytes) {
        view.peak_live_bytes = live;
        view.peak_time_us = e.time_us;
        for (std::size_t i = 0; i < owner_live.size(); ++i) view.owners[i].live_at_peak_bytes = owner_live[i];
      }
    } else if (e.action == TraceAction::free) {
      const auto it = live_index.find(e.pointer);
      if (it == live_index.end()) continue;
      Band& b = lives[it->second];
      b.end_us = std::max(e.time_us, b.begin_us);  // a free logged a little before its allocation
      b.freed = true;
      owner_live[b.owner] -= b.size;
      live -= b.size;
      live_index.erase(it);
    }
  }
  for (Band& b : lives) {
    if (!b.freed) b.end_us = last;
  }
  view.allocations = lives.size();
  if (lives.empty()) return view;  // nothing to draw: no times

  // The bands: most bytes for longest, drawn in allocation order.
  std::vector<std::size_t> order(lives.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto weight = [&](std::size_t i) {
    const Band& b = lives[i];
    // One microsecond at least, so that allocations freed at once still rank by size.
    return static_cast<double>(b.size) * static_cast<double>(std::max<std::uint64_t>(b.end_us - b.begin_us, 1));
  };
  // Only allocations that live a while can be drawn: one freed the moment
  // it was made holds no memory at any time.
  std::erase_if(order, [&](std::size_t i) { return lives[i].freed && lives[i].end_us <= lives[i].begin_us; });
  const std::size_t kept = std::min(max_bands, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kept), order.end(),
                    [&](std::size_t a, std::size_t b) { return weight(a) > weight(b); });
  std::vector<bool> drawn(lives.size(), false);
  for (std::size_t k = 0; k < kept; ++k) drawn[order[k]] = true;
  for (std::size_t i = 0; i < lives.size(); ++i) {
    if (drawn[i]) view.bands.push_back(lives[i]);
  }
  view.left_out = lives.size() - kept;  // zero-length ones included: they hold nothing

  // The sample times: evenly spaced, and the peak's.
  const std::size_t n = std::max<std::size_t>(points, 2);
  for (std::size_t k = 0; k < n; ++k) {
    view.times.push_back(first + (last - first) * k / (n - 1));
  }
  view.times.push_back(view.peak_time_us);
  // And where each band begins and ends, so that every band shows, however
  // short, and its neighbours shift exactly where it comes and goes.
  for (const Band& b : view.bands) {
    view.times.push_back(b.begin_us);
    if (b.freed) view.times.push_back(b.end_us);
  }
  std::sort(view.times.begin(), view.times.end());
  view.times.erase(std::unique(view.times.begin(), view.times.end()), view.times.end());
  // Live at time t: begin <= t < end (or never freed). A difference array
  // over the samples, then a running sum.
  std::vector<std::int64_t> change(view.times.size() + 1, 0);
  auto sample_at_or_after = [&](std::uint64_t t) {
    return static_cast<std::size_t>(std::lower_bound(view.times.begin(), view.times.end(), t) - view.times.begin());
  };
  for (std::size_t i = 0; i < lives.size(); ++i) {
    if (drawn[i]) continue;
    const Band& b = lives[i];
    const auto size = static_cast<std::int64_t>(b.size);
    change[sample_at_or_after(b.begin_us)] += size;
    if (b.freed) change[sample_at_or_after(b.end_us)] -= size;
  }
  std::int64_t running = 0;
  for (std::size_t k = 0; k < view.times.size(); ++k) {
    running += change[k];
    view.rest.push_back(static_cast<std::uint64_t>(std::max<std::int64_t>(running, 0)));
  }
  return view;
}

}  // namespace tidepool::replay
