// The exit summary's wording. See exit_summary.hpp. It runs once, at exit,
// so it builds strings freely.
#include "runtime/exit_summary.hpp"

#include <cstdio>

#include "runtime/logging.hpp"
#include "util/util.hpp"

namespace tidepool::runtime {

namespace {

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", fraction * 100.0);
  return text;
}

std::string count(std::uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::string device_summary(const DeviceReport& d, const std::vector<CallerName>& callers) {
  const pool::PoolStats& s = d.pool;
  using util::format_size;
  std::string out = "device " + std::to_string(d.device) + " at exit: ";
  if (d.device_total_bytes == 0) {  // no pool was made: everything went to the driver
    return out + "no pool; " + count(d.passthrough_allocations, "allocation", "allocations") +
           " passed through to the driver.";
  }
  if (!d.complete) {
    return out +
           "its pool was still busy (a thread interrupted inside a tidepool call?), so its figures are left "
           "out; budget " +
           format_size(d.device_limit_bytes) + " of the device's " + format_size(d.device_total_bytes) + ".";
  }
  out += count(s.allocations, "allocation", "allocations") + ", " + count(s.frees, "free", "frees") + ", " +
         count(s.live_blocks, "block", "blocks") + " still live (" + format_size(s.live_bytes) + ")";
  out += s.ooms == 0 ? "; no allocation failed for lack of memory"
                     : "; " + count(s.ooms, "allocation", "allocations") + " failed for lack of memory";
  if (d.passthrough_allocations > 0) {
    out += "; " + count(d.passthrough_allocations, "allocation", "allocations") + " passed through to the driver";
  }
  out += ". Peak live " + format_size(s.peak_live_bytes) + " against peak reserved " +
         format_size(s.peak_reserved_bytes) + ": utilization " + percent(s.utilization());
  out += ". Now " + format_size(s.reserved_bytes) + " reserved, " + format_size(s.free_bytes) +
         " of it free (largest free block " + format_size(s.largest_free_block) + ", external fragmentation " +
         percent(s.external_fragmentation()) + "), internal waste " + format_size(s.handed_out_bytes - s.live_bytes);
  out += ". Driver: " + count(s.maps, "page map", "page maps") + ", " + count(s.unmaps, "unmap", "unmaps") + ", " +
         count(s.parked_reuses, "parked reuse", "parked reuses") + " (no driver call), " +
         count(s.page_creates, "page created", "pages created") + ", " + count(s.trims, "trim", "trims");
  out += ". Budget " + format_size(d.device_limit_bytes) + " of the device's " + format_size(d.device_total_bytes);
  if (d.foreign.peak_bytes > 0) {
    out += ", of which device memory made outside the pool (cuMemCreate) held " + format_size(d.foreign.bytes) +
           " at exit, at most " + format_size(d.foreign.peak_bytes);
  }
  // Who held the memory at the live peak: the largest few owners.
  const std::vector<LibraryOwner> owners = owners_by_library(d.owners, callers);
  constexpr std::size_t kNamed = 4;
  for (std::size_t i = 0; i < owners.size() && i < kNamed; ++i) {
    const LibraryOwner& o = owners[i];
    out += std::string(i == 0 ? ". At the live peak: " : ", ") +
           (o.library.empty() ? std::string("callers not known") : o.library + " (" + std::string(o.kind) + ")") + " " +
           format_size(o.sum.live_at_peak_bytes);
  }
  if (owners.size() > kNamed) out += ", and " + count(owners.size() - kNamed, "more owner", "more owners");
  if (d.eviction) {
    const residency::ResidencyStats& r = d.residency;
    if (r.evictions == 0) {
      out += ". Eviction on, never needed";
    } else {
      out += ". Evictions: " + count(r.evictions, "batch", "batches") + " moved " + format_size(r.evicted_bytes) +
             " to the host (at most " + format_size(r.peak_evicted_bytes) + " there at once), " +
             count(r.prefetches, "bring-back", "bring-backs") + " moved " + format_size(r.prefetched_bytes) +
             " back; host cache peak " + format_size(r.host_cache_peak_bytes) + " pinned";
      if (r.host_cache_full > 0) out += ", full " + count(r.host_cache_full, "time", "times");
    }
  }
  return out + ".";
}

std::string outputs_summary(const SummaryOutputs& outputs) {
  std::string out = "at exit: ";
  if (outputs.report_path.empty()) {
    out += "no report configured (report:PATH writes one)";
  } else if (outputs.report_written) {
    out += "report written to '" + outputs.report_path + "'";
  } else {
    out += "the report could not be written to '" + outputs.report_path + "' (see the error above)";
  }
  if (!outputs.trace_path.empty()) out += "; trace recorded to '" + outputs.trace_path + "'";
  return out;
}

void log_exit_summary(const Report& report, const SummaryOutputs& outputs) {
  if (!logger().should_log(spdlog::level::info)) return;
  if (report.passthrough) {
    log_info("at exit: tidepool passed every call through to the driver ({})",
             report.run.config.passthrough ? "the configuration was refused" : "the driver could not be opened");
  } else if (report.devices.empty()) {
    log_info("at exit: no device memory was allocated through tidepool");
  }
  for (const DeviceReport& d : report.devices) log_info("{}", device_summary(d, report.callers));
  log_info("{}", outputs_summary(outputs));
}

}  // namespace tidepool::runtime
