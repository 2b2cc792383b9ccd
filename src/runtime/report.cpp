// Serialising a Report to JSON with nlohmann-json (compiled in, hidden).
// ordered_json keeps keys in the order written here, which is the order
// docs/report.md documents them in: change one, change the other (the
// test report_schema_test compares them).
#include "runtime/report.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "util/util.hpp"

namespace tidepool::runtime {

namespace {

using Json = nlohmann::ordered_json;

// One option's value in `run.config`, typed: sizes in bytes, switches as
// booleans, names as strings, an unset path as null.
Json option_value(const std::optional<util::SizeSpec>& limit) {
  if (!limit) return nullptr;  // what the device reports: each device's device_limit_bytes
  if (limit->is_percent) {
    char text[32];
    std::snprintf(text, sizeof text, "%g%%", limit->percent);
    return text;
  }
  return limit->bytes;
}
Json option_value(const std::string& text) { return text.empty() ? Json(nullptr) : Json(text); }
Json option_value(bool on) { return on; }
Json option_value(std::uint64_t bytes) { return bytes; }
Json option_value(unsigned percent) { return percent; }
Json option_value(LogLevel level) {
  static constexpr const char* kNames[] = {"off", "error", "warn", "info", "debug", "trace"};
  return kNames[static_cast<int>(level)];
}
Json option_value(CompressMode mode) { return compress_mode_name(mode); }
Json option_value(PrefetchMode mode) {
  static constexpr const char* kNames[] = {"off", "hints", "launch", "learn"};
  return kNames[static_cast<int>(mode)];
}

// Every row of the options table, in its order, so that a new option
// appears here without an edit.
Json config_json(const RunInfo& run) {
  Json config = Json::object();
#define TIDEPOOL_REPORT_OPTION(name, kind, default_value, description) config[#name] = option_value(run.config.name);
  TIDEPOOL_OPTIONS(TIDEPOOL_REPORT_OPTION)
#undef TIDEPOOL_REPORT_OPTION
  // The defaults that resolve to something: what was actually used.
  config["host_cache"] = run.host_cache_bytes;
  if (!run.cuda_lib.empty()) config["cuda_lib"] = run.cuda_lib;
  return config;
}

Json run_json(const RunInfo& run) {
  Json j = Json::object();
  j["pid"] = run.pid;
  j["argv"] = run.argv;
  j["hostname"] = run.hostname;
  j["start_time"] = iso8601_utc(run.start_unix_ns);
  j["start_unix"] = static_cast<double>(run.start_unix_ns) / 1e9;
  j["end_time"] = iso8601_utc(run.end_unix_ns);
  j["end_unix"] = static_cast<double>(run.end_unix_ns) / 1e9;
  j["duration_seconds"] = run.duration_seconds;
  j["at_exit"] = run.at_exit;
  j["conf"] = run.conf ? Json(*run.conf) : Json(nullptr);
  j["conf_error"] = run.config.passthrough ? Json(run.config.error) : Json(nullptr);
  j["config"] = config_json(run);
  return j;
}

Json size_classes_json(const pool::SizeHistogram& histogram) {
  Json classes = Json::array();
  for (std::size_t c = 0; c < pool::SizeHistogram::kClasses; ++c) {
    const pool::SizeClassCounts& k = histogram[c];
    if (k.allocations == 0 && k.ooms == 0) continue;  // only the classes the run used
    Json entry = Json::object();
    entry["min_bytes"] = pool::SizeHistogram::min_bytes(c);
    const std::uint64_t max = pool::SizeHistogram::max_bytes(c);
    entry["max_bytes"] = max != 0 ? Json(max) : Json(nullptr);
    entry["allocations"] = k.allocations;
    entry["frees"] = k.frees;
    entry["live"] = k.live;
    entry["peak_live"] = k.peak_live;
    entry["requested_bytes"] = k.requested_bytes;
    entry["ooms"] = k.ooms;
    classes.push_back(std::move(entry));
  }
  return classes;
}

// Device memory held outside the pool, by the library that made it.
Json foreign_owners_json(const ForeignMemory::DeviceFigures& foreign, const std::vector<CallerName>& callers) {
  struct Sum {
    std::string library;
    std::size_t bytes = 0;
    std::size_t peak_bytes = 0;  // the largest of its call sites' peaks
  };
  std::vector<Sum> sums;
  for (const ForeignMemory::ByTag& t : foreign.by_tag) {  // heaviest peak first, so libraries come in that order
    const std::string library = t.tag < callers.size() ? callers[t.tag].library : std::string();
    auto it = std::find_if(sums.begin(), sums.end(), [&](const Sum& s) { return s.library == library; });
    if (it == sums.end()) it = sums.insert(sums.end(), Sum{library});
    it->bytes += t.bytes;
    it->peak_bytes = std::max(it->peak_bytes, t.peak_bytes);
  }
  Json out = Json::array();
  for (const Sum& s : sums) {
    Json entry = Json::object();
    entry["library"] = s.library.empty() ? Json(nullptr) : Json(s.library);
    entry["bytes"] = s.bytes;
    entry["peak_bytes"] = s.peak_bytes;
    out.push_back(entry);
  }
  return out;
}

// Memory by who asked for it (owners_by_library), with each call site.
Json owners_json(const pool::OwnerBytes& owners, const std::vector<CallerName>& callers) {
  Json out = Json::array();
  for (const LibraryOwner& l : owners_by_library(owners, callers)) {
    Json entry = Json::object();
    entry["library"] = l.library.empty() ? Json(nullptr) : Json(l.library);
    entry["owner"] = l.kind;
    entry["allocations"] = l.sum.allocations;
    entry["failures"] = l.sum.failures;
    entry["requested_bytes"] = l.sum.requested_bytes;
    entry["live_bytes"] = l.sum.live_bytes;
    entry["live_at_peak_bytes"] = l.sum.live_at_peak_bytes;
    Json sites = Json::array();
    for (const std::size_t t : l.tags) {
      const pool::OwnerCounts& c = owners[t];
      const CallerName* who = t < callers.size() ? &callers[t] : nullptr;
      Json site = Json::object();
      site["function"] = who == nullptr || who->function.empty() ? Json(nullptr) : Json(who->function);
      char offset[24];
      std::snprintf(offset, sizeof offset, "0x%llx", static_cast<unsigned long long>(who != nullptr ? who->offset : 0));
      site["offset"] = who == nullptr || who->library.empty() ? Json(nullptr) : Json(offset);
      site["allocations"] = c.allocations;
      site["failures"] = c.failures;
      site["requested_bytes"] = c.requested_bytes;
      site["live_bytes"] = c.live_bytes;
      site["live_at_peak_bytes"] = c.live_at_peak_bytes;
      site["peak_live_bytes"] = c.peak_live_bytes;
      sites.push_back(std::move(site));
    }
    entry["call_sites"] = std::move(sites);
    out.push_back(std::move(entry));
  }
  return out;
}

Json device_json(const DeviceReport& d, const std::vector<CallerName>& callers) {
  const pool::PoolStats& s = d.pool;
  const residency::ResidencyStats& r = d.residency;
  Json out = Json::object();
  out["device"] = d.device;
  // Headline: how much the program needed at most, what that cost, and
  // whether it ever went without.
  out["peak_live_bytes"] = s.peak_live_bytes;
  out["peak_reserved_bytes"] = s.peak_reserved_bytes;
  out["utilization"] = s.utilization();
  out["ooms"] = s.ooms;
  // The budget and the device.
  out["device_limit_bytes"] = d.device_limit_bytes;
  out["device_total_bytes"] = d.device_total_bytes;
  out["vmm"] = d.vmm;
  out["page_bytes"] = d.page_bytes;
  // Allocation counts.
  out["allocations"] = s.allocations;
  out["frees"] = s.frees;
  out["live_blocks"] = s.live_blocks;
  out["passthrough_allocations"] = d.passthrough_allocations;
  // Bytes, now.
  out["live_bytes"] = s.live_bytes;
  out["handed_out_bytes"] = s.handed_out_bytes;
  out["internal_waste_bytes"] = s.handed_out_bytes - s.live_bytes;
  out["reserved_bytes"] = s.reserved_bytes;
  out["spare_bytes"] = s.spare_bytes;
  // Fragmentation, now.
  out["external_fragmentation"] = s.external_fragmentation();
  out["free_bytes"] = s.free_bytes;
  out["largest_free_block_bytes"] = s.largest_free_block;
  out["free_blocks"] = s.free_blocks;
  out["segments"] = s.segments;
  // Driver work.
  out["maps"] = s.maps;
  out["unmaps"] = s.unmaps;
  out["parked_reuses"] = s.parked_reuses;
  out["access_grants"] = s.access_grants;
  out["page_creates"] = s.page_creates;
  out["page_releases"] = s.page_releases;
  out["trims"] = s.trims;
  // Stream safety.
  out["deferred_bytes"] = s.deferred_bytes;
  out["cross_stream_waits"] = s.cross_stream_waits;
  out["device_barriers"] = s.device_barriers;
  out["stitching_barriers"] = s.stitching_barriers;
  out["legacy_order_barriers"] = s.legacy_order_barriers;
  out["handout_barriers"] = s.handout_barriers;
  out["standing_barriers"] = s.standing_barriers;
  out["import_waits"] = s.import_waits;
  out["pending_page_waits"] = s.pending_page_waits;
  out["pending_page_detours"] = s.pending_page_detours;
  // Residency: always there (zero without eviction), so that a reader needs
  // no case for their absence.
  out["eviction"] = d.eviction;
  out["evictions"] = r.evictions;
  out["evicted_bytes"] = r.evicted_bytes;
  out["pin_waits"] = s.pin_waits;
  out["peak_evicted_bytes"] = r.peak_evicted_bytes;
  out["host_resident_bytes"] = r.host_resident_bytes;
  out["prefetches"] = r.prefetches;
  out["prefetched_bytes"] = r.prefetched_bytes;
  out["launch_prefetches"] = r.launch_prefetches;
  out["host_resident_launches"] = r.host_resident_launches;
  out["host_cache_bytes"] = r.host_cache_bytes;
  out["host_cache_peak_bytes"] = r.host_cache_peak_bytes;
  out["host_cache_limit_bytes"] = r.host_cache_limit_bytes;
  out["host_cache_full"] = r.host_cache_full;
  out["pin_calls"] = r.pin_calls;
  out["sync_pins"] = r.sync_pins;
  out["residency_gates"] = r.gates;
  out["residency_fallbacks"] = r.fallbacks;
  out["failed_page_moves"] = r.failed_moves;
  out["tracked_moves"] = r.tracked_moves;
  out["learned_period"] = r.learned_period;
  out["learned_launches"] = r.learned_launches;
  {
    Json tried = Json::array();
    for (const auto& [period, run] : r.learned_candidates) {
      if (period != 0) tried.push_back({period, run});
    }
    out["learned_candidates"] = std::move(tried);
  }
  out["learned_prefetches"] = r.learned_prefetches;
  out["precopies"] = r.precopies;
  out["precopies_used"] = r.precopies_used;
  out["residency_wait_ms"] = r.move_wait_ms;
  out["residency_remap_ms"] = r.remap_ms;
  out["sync_pin_ms"] = r.sync_pin_ms;
  out["to_host_gbps"] = r.to_host_gbps;
  out["to_device_gbps"] = r.to_device_gbps;
  // Compressed eviction (compressor.hpp): zero unless compress is on.
  const residency::CompressStats& z = r.compression;
  out["compressing"] = r.compressing;
  out["compressed_pages"] = z.compressed_pages;
  out["compressed_bytes_before"] = z.bytes_before;
  out["compressed_bytes_after"] = z.bytes_after;
  out["compression_ratio"] =
      z.bytes_after == 0 ? 0.0 : static_cast<double>(z.bytes_before) / static_cast<double>(z.bytes_after);
  out["raw_by_sample_pages"] = z.raw_pages;
  out["raw_by_sample_bytes"] = z.raw_bytes;
  out["unsampled_pages"] = z.unsampled_pages;
  out["raw_for_room_pages"] = z.raw_for_room_pages;
  out["expanded_pages"] = z.expanded_pages;
  out["expand_failures"] = z.expand_failures;
  out["compressed_now_pages"] = z.compressed_now;
  out["compressed_store_bytes"] = z.store.held_bytes;
  out["compressed_store_peak_bytes"] = z.store.peak_held_bytes;
  out["codec_ms"] = z.codec_ms;
  // Whether the figures above could be read (see DeviceReport::complete).
  out["complete"] = d.complete;
  // Outside the pool.
  out["foreign_bytes"] = d.foreign.bytes;
  out["peak_foreign_bytes"] = d.foreign.peak_bytes;
  out["foreign_owners"] = foreign_owners_json(d.foreign, callers);
  out["size_classes"] = size_classes_json(d.size_classes);
  out["owners"] = owners_json(d.owners, callers);
  return out;
}

}  // namespace

std::vector<LibraryOwner> owners_by_library(const pool::OwnerBytes& owners, const std::vector<CallerName>& callers) {
  std::vector<LibraryOwner> libraries;
  const CallerName unknown;
  for (std::size_t t = 0; t < owners.used(); ++t) {
    const pool::OwnerCounts& c = owners[t];
    if (c.allocations == 0 && c.failures == 0) continue;
    const CallerName& who = t < callers.size() ? callers[t] : unknown;
    auto it = std::find_if(libraries.begin(), libraries.end(),
                           [&](const LibraryOwner& l) { return l.library == who.library; });
    if (it == libraries.end()) {
      LibraryOwner l;
      l.library = who.library;
      l.program = who.program;
      l.kind = who.library.empty() ? "not known" : CallSites::owner_kind(who.library, who.program);
      it = libraries.insert(libraries.end(), std::move(l));
    }
    it->sum.allocations += c.allocations;
    it->sum.failures += c.failures;
    it->sum.requested_bytes += c.requested_bytes;
    it->sum.live_bytes += c.live_bytes;
    it->sum.live_at_peak_bytes += c.live_at_peak_bytes;
    it->tags.push_back(t);
  }
  auto heavier = [](const pool::OwnerCounts& a, const pool::OwnerCounts& b) {
    if (a.live_at_peak_bytes != b.live_at_peak_bytes) return a.live_at_peak_bytes > b.live_at_peak_bytes;
    return a.requested_bytes > b.requested_bytes;
  };
  std::stable_sort(libraries.begin(), libraries.end(),
                   [&](const LibraryOwner& a, const LibraryOwner& b) { return heavier(a.sum, b.sum); });
  for (LibraryOwner& l : libraries) {
    std::stable_sort(l.tags.begin(), l.tags.end(),
                     [&](std::size_t a, std::size_t b) { return heavier(owners[a], owners[b]); });
  }
  return libraries;
}

std::string report_json(const Report& report) {
  Json root = Json::object();
  root["version"] = 1;
  root["tidepool_version"] = util::version();
  root["run"] = run_json(report.run);
  root["policy"] = report.policy;
  root["passthrough"] = report.passthrough;
  Json launches = Json::object();
  launches["scanned"] = report.launches.scanned;
  launches["naming_blocks"] = report.launches.naming_blocks;
  launches["unread"] = report.launches.unread;
  root["launches"] = std::move(launches);
  Json devices = Json::array();
  for (const DeviceReport& d : report.devices) devices.push_back(device_json(d, report.callers));
  root["devices"] = std::move(devices);
  // Invalid UTF-8 (an argument, a path) is replaced rather than thrown on.
  return root.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

util::Status write_report(const Report& report, const std::string& path) {
  return util::replace_file(path, report_json(report));
}

}  // namespace tidepool::runtime
