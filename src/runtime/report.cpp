// Serialising a Report to JSON with nlohmann-json (compiled in, hidden).
#include "runtime/report.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "util/output_file.hpp"

#ifndef TIDEPOOL_VERSION_STRING
#define TIDEPOOL_VERSION_STRING "0.1.0"
#endif

namespace tidepool::runtime {

std::string report_json(const Report& report) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceReport& d : report.devices) {
    const pool::PoolStats& s = d.pool;
    devices.push_back({
        {"device", d.device},
        {"allocations", s.allocations},
        {"frees", s.frees},
        {"live_bytes", s.live_bytes},
        {"peak_live_bytes", s.peak_live_bytes},
        {"reserved_bytes", s.reserved_bytes},
        {"peak_reserved_bytes", s.peak_reserved_bytes},
        {"utilization", s.utilization()},
        {"external_fragmentation", s.external_fragmentation()},
        {"internal_waste_bytes", s.handed_out_bytes - s.live_bytes},
        {"ooms", s.ooms},
        {"passthrough_allocations", d.passthrough_allocations},
        {"maps", s.maps},
        {"unmaps", s.unmaps},
        {"parked_reuses", s.parked_reuses},
        {"trims", s.trims},
        {"spare_bytes", s.spare_bytes},
        {"deferred_bytes", s.deferred_bytes},
        {"cross_stream_waits", s.cross_stream_waits},
        {"device_barriers", s.device_barriers},
        {"live_blocks", s.live_blocks},
        {"free_blocks", s.free_blocks},
        {"segments", s.segments},
        {"device_limit_bytes", d.device_limit_bytes},
        {"device_total_bytes", d.device_total_bytes},
        {"vmm", d.vmm},
    });
    // The residency keys are always there (zero without eviction), so that
    // a reader needs no case for their absence.
    const residency::ResidencyStats& r = d.residency;
    nlohmann::json& out = devices.back();
    out["eviction"] = d.eviction;
    out["evictions"] = r.evictions;
    out["evicted_bytes"] = r.evicted_bytes;
    out["prefetches"] = r.prefetches;
    out["prefetched_bytes"] = r.prefetched_bytes;
    out["host_resident_launches"] = r.host_resident_launches;
    out["launch_prefetches"] = r.launch_prefetches;
    out["host_resident_bytes"] = r.host_resident_bytes;
    out["peak_evicted_bytes"] = r.peak_evicted_bytes;
    out["host_cache_bytes"] = r.host_cache_bytes;
    out["host_cache_peak_bytes"] = r.host_cache_peak_bytes;
    out["host_cache_limit_bytes"] = r.host_cache_limit_bytes;
    out["host_cache_full"] = r.host_cache_full;
    out["pin_calls"] = r.pin_calls;
    out["sync_pins"] = r.sync_pins;
    out["residency_gates"] = r.gates;
    out["residency_fallbacks"] = r.fallbacks;
    out["tracked_moves"] = r.tracked_moves;
    out["learned_period"] = r.learned_period;
    out["learned_prefetches"] = r.learned_prefetches;
    out["precopies"] = r.precopies;
    out["precopies_used"] = r.precopies_used;
    out["failed_page_moves"] = r.failed_moves;
    out["to_host_gbps"] = r.to_host_gbps;
    out["to_device_gbps"] = r.to_device_gbps;
  }
  nlohmann::json root = {
      {"version", 1},
      {"tidepool_version", TIDEPOOL_VERSION_STRING},
      {"policy", report.policy},
      {"passthrough", report.passthrough},
      {"devices", devices},
  };
  return root.dump(2) + "\n";
}

util::Status write_report(const Report& report, const std::string& path) {
  return util::replace_file(path, report_json(report));
}

}  // namespace tidepool::runtime
