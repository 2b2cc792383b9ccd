// The JSON report: what `report:PATH` writes at exit and tidepool_report()
// writes on demand. docs/report.md is its schema, key by key in the file's
// order; a test holds the two together. Keys are never renamed once
// released; later features add keys of their own. Layout, in this order:
//   {"version": 1, "tidepool_version": "...",
//    "run": {"pid": ..., "argv": [...], ..., "config": {...}},
//    "policy": "...", "passthrough": false, "launches": {...},
//    "devices": [{"device": 0, <headline>, <budget>, <counts>, <bytes>,
//                 <fragmentation>, <driver work>, <stream safety>,
//                 <residency>, "complete": true, "size_classes": [...],
//                 "owners": [...]}]}
// Objects keep the order the code gives them (nlohmann::ordered_json), so
// a reader sees the device first and the headline figures next.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pool/pool.hpp"
#include "residency/residency.hpp"
#include "runtime/call_sites.hpp"
#include "runtime/foreign_memory.hpp"
#include "runtime/run_info.hpp"
#include "util/util.hpp"

namespace tidepool::runtime {

struct DeviceReport {
  int device = 0;
  // false: the pool could not be read (at exit, still busy after the wait
  // the exit path allows); its figures below are zero.
  bool complete = true;
  pool::PoolStats pool;
  pool::SizeHistogram size_classes;
  pool::OwnerBytes owners;                    // by caller tag: Report::callers names them
  std::uint64_t passthrough_allocations = 0;  // allocations tidepool handed to the driver untouched
  std::uint64_t device_limit_bytes = 0;
  std::uint64_t device_total_bytes = 0;
  std::uint64_t page_bytes = 0;  // the pool's physical page (VMM granularity)
  bool vmm = false;
  bool eviction = false;  // residency is on for this device
  residency::ResidencyStats residency;
  // Device memory the process holds outside the pool (ForeignMemory).
  ForeignMemory::DeviceFigures foreign;
};

// Kernel launches as launch prefetch saw them (prefetch:launch or learn,
// with eviction on some device); zero otherwise.
struct LaunchCounts {
  std::uint64_t scanned = 0;        // launches the hooks scanned for pool pointers
  std::uint64_t naming_blocks = 0;  // of those, launches that named a pool block
  std::uint64_t unread = 0;         // of those, launches whose parameters could not be read
};

struct Report {
  RunInfo run;
  std::string policy;
  bool passthrough = false;  // the whole process ran with tidepool passing calls through
  LaunchCounts launches;
  std::vector<DeviceReport> devices;
  // Each owner tag's caller, resolved (index: the tag; 0 and tags past the
  // end are "not known").
  std::vector<CallerName> callers;
};

// A device's owners as the report groups them: call sites by library, the
// library holding the most at the live peak first, and within it the call
// sites likewise (their tags, into the OwnerBytes and Report::callers).
struct LibraryOwner {
  std::string library;  // empty: not known
  bool program = false;
  std::string_view kind;  // CallSites::owner_kind, or "not known"
  pool::OwnerCounts sum;  // its call sites' counts added (peak_live_bytes left 0: peaks do not add)
  std::vector<std::size_t> tags;
};
std::vector<LibraryOwner> owners_by_library(const pool::OwnerBytes& owners, const std::vector<CallerName>& callers);

std::string report_json(const Report& report);
// Writes atomically (temporary file, then rename), so a reader never sees half a report.
util::Status write_report(const Report& report, const std::string& path);

}  // namespace tidepool::runtime
