// The JSON report: what `report:PATH` writes at exit and tidepool_report()
// writes on demand. Keys are never renamed once released; later features add
// keys of their own. Layout:
//   {"version": 1, "tidepool_version": "...", "policy": "...",
//    "devices": [{"device": 0, "allocations": ..., ...}]}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pool/pool.hpp"
#include "residency/residency.hpp"
#include "util/status.hpp"

namespace tidepool::runtime {

struct DeviceReport {
  int device = 0;
  pool::PoolStats pool;
  std::uint64_t passthrough_allocations = 0;  // allocations tidepool handed to the driver untouched
  std::uint64_t device_limit_bytes = 0;
  std::uint64_t device_total_bytes = 0;
  bool vmm = false;
  bool eviction = false;  // residency is on for this device
  residency::ResidencyStats residency;
};

struct Report {
  std::string policy;
  bool passthrough = false;  // the whole process ran with tidepool passing calls through
  std::vector<DeviceReport> devices;
};

std::string report_json(const Report& report);
// Writes atomically (temporary file, then rename), so a reader never sees half a report.
util::Status write_report(const Report& report, const std::string& path);

}  // namespace tidepool::runtime
