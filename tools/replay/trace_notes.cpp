// Notes on one trace's results: the ★, baselines ahead of it, a sample
// trace's origin (see the header).
#include "trace_notes.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string_view>

#include "formatting.hpp"

namespace tidepool::replay {

bool is_baseline(const std::string& policy) {
  return policy == "pytorch_rules" || policy == "rmm_pool" || policy == "cuda_malloc";
}

std::size_t best_run(const std::vector<const Result*>& runs) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < runs.size(); ++i) {
    const Result& a = *runs[i];
    const Result& b = *runs[best];
    if (is_baseline(a.policy) != is_baseline(b.policy)) {
      if (!is_baseline(a.policy)) best = i;
    } else if (a.failed_allocations != b.failed_allocations) {
      if (a.failed_allocations < b.failed_allocations) best = i;
    } else if (a.utilization != b.utilization) {
      if (a.utilization > b.utilization) best = i;
    } else if (a.peak_reserved_bytes < b.peak_reserved_bytes) {
      best = i;
    }
  }
  return best;
}

std::vector<const Result*> baselines_ahead(const std::vector<const Result*>& runs, const Result& best) {
  std::vector<const Result*> ahead;
  if (is_baseline(best.policy)) return ahead;
  for (const Result* r : runs) {
    if (is_baseline(r->policy) && r->failed_allocations <= best.failed_allocations &&
        r->utilization > best.utilization) {
      ahead.push_back(r);
    }
  }
  return ahead;
}

std::string sample_origin(const Result& result) {
  // data/traces/README.md: the name and the event count of each.
  struct Sample {
    std::string_view file;
    std::uint64_t events;
  };
  static constexpr Sample kSamples[] = {
      {"resnet50_b16.csv.gz", 77496}, {"mobilenet_v2_b32.csv.gz", 77050}, {"seq2seq_b32.csv.gz", 34692}};
  const std::string name = base_name(result.trace);
  for (const Sample& s : kSamples) {
    if (name == s.file && result.events == s.events) {
      return "a sample trace (data/traces): PyTorch's tensor allocations recorded on the CPU, so one stream and no "
             "cuDNN or cuBLAS workspaces; a GPU run adds both";
    }
  }
  return {};
}

std::vector<const OwnerUsage*> owners_at_peak(const AllocationView& view) {
  std::vector<const OwnerUsage*> out;
  for (const OwnerUsage& o : view.owners) {
    if (o.allocations != 0) out.push_back(&o);
  }
  std::stable_sort(out.begin(), out.end(), [](const OwnerUsage* a, const OwnerUsage* b) {
    if (a->live_at_peak_bytes != b->live_at_peak_bytes) return a->live_at_peak_bytes > b->live_at_peak_bytes;
    return a->requested_bytes > b->requested_bytes;
  });
  return out;
}

std::string owners_line(const AllocationView& view) {
  if (!view.named) return {};
  std::string out;
  for (const OwnerUsage* o : owners_at_peak(view)) {
    char figure[48];
    std::snprintf(figure, sizeof figure, " %.1f MiB", static_cast<double>(o->live_at_peak_bytes) / 1048576.0);
    out += (out.empty() ? "" : ", ") + (o->name.empty() ? std::string("not named") : o->name + " (" + o->kind + ")") +
           figure;
  }
  return "at the live peak: " + out;
}

}  // namespace tidepool::replay
