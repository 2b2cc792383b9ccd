// RunReport: reading a run's JSON report, and its lines under the table.
#include "run_report.hpp"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formatting.hpp"
#include "runtime/runtime.hpp"

namespace tidepool::replay {

namespace {

using Json = nlohmann::json;

// Thrown for a report whose shape is not a tidepool report's.
struct Malformed {
  std::string what;
};

const Json& member(const Json& object, const char* key) {
  if (!object.is_object() || !object.contains(key)) throw Malformed{std::string("no \"") + key + "\""};
  return object.at(key);
}

std::uint64_t count(const Json& object, const char* key) {
  const Json& v = member(object, key);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
    throw Malformed{std::string("\"") + key + "\" is not a count"};
  }
  return v.get<std::uint64_t>();
}

std::string text_or_empty(const Json& object, const char* key) {
  const Json& v = member(object, key);
  if (v.is_null()) return {};
  if (!v.is_string()) throw Malformed{std::string("\"") + key + "\" is not text"};
  return v.get<std::string>();
}

RunOwner owner_of(const Json& o) {
  RunOwner owner;
  owner.library = text_or_empty(o, "library");
  owner.owner = text_or_empty(o, "owner");
  owner.allocations = count(o, "allocations");
  owner.failures = count(o, "failures");
  owner.requested_bytes = count(o, "requested_bytes");
  owner.live_bytes = count(o, "live_bytes");
  owner.live_at_peak_bytes = count(o, "live_at_peak_bytes");
  const Json& sites = member(o, "call_sites");
  if (!sites.is_array()) throw Malformed{"\"call_sites\" is not a list"};
  for (const Json& s : sites) {
    RunCallSite site;
    site.function = text_or_empty(s, "function");
    site.offset = text_or_empty(s, "offset");
    site.allocations = count(s, "allocations");
    site.live_at_peak_bytes = count(s, "live_at_peak_bytes");
    site.peak_live_bytes = count(s, "peak_live_bytes");
    owner.call_sites.push_back(std::move(site));
  }
  return owner;
}

RunDevice device_of(const Json& d) {
  RunDevice device;
  const Json& id = member(d, "device");
  if (!id.is_number_integer()) throw Malformed{"\"device\" is not a number"};
  device.device = id.get<int>();
  device.peak_live_bytes = count(d, "peak_live_bytes");
  device.peak_reserved_bytes = count(d, "peak_reserved_bytes");
  const Json& utilization = member(d, "utilization");
  if (!utilization.is_number()) throw Malformed{"\"utilization\" is not a number"};
  device.utilization = utilization.get<double>();
  device.ooms = count(d, "ooms");
  device.allocations = count(d, "allocations");
  device.passthrough_allocations = count(d, "passthrough_allocations");
  device.device_limit_bytes = count(d, "device_limit_bytes");
  const Json& eviction = member(d, "eviction");
  if (!eviction.is_boolean()) throw Malformed{"\"eviction\" is not true or false"};
  device.eviction = eviction.get<bool>();
  device.evicted_bytes = count(d, "evicted_bytes");
  // Reports from before owners were recorded have none: not an error.
  if (d.contains("owners")) {
    const Json& owners = d.at("owners");
    if (!owners.is_array()) throw Malformed{"\"owners\" is not a list"};
    for (const Json& o : owners) device.owners.push_back(owner_of(o));
  }
  return device;
}

}  // namespace

bool load_run_report(const std::string& path, RunReport* report, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = path + ": cannot be read";
    return false;
  }
  std::stringstream text;
  text << in.rdbuf();
  const Json root = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    *error = path + ": not JSON (a report written by report:PATH is expected)";
    return false;
  }
  try {
    if (!root.is_object() || !root.contains("tidepool_version")) {
      throw Malformed{"not a tidepool report (no \"tidepool_version\")"};
    }
    report->path = path;
    report->policy = text_or_empty(root, "policy");
    const Json& run = member(root, "run");
    const Json& argv = member(run, "argv");
    if (!argv.is_array()) throw Malformed{"\"argv\" is not a list"};
    for (const Json& arg : argv) {
      if (!arg.is_string()) throw Malformed{"an argument is not text"};
      report->command += (report->command.empty() ? "" : " ") + arg.get<std::string>();
    }
    const Json& duration = member(run, "duration_seconds");
    if (!duration.is_number()) throw Malformed{"\"duration_seconds\" is not a number"};
    report->duration_seconds = duration.get<double>();
    const Json& devices = member(root, "devices");
    if (!devices.is_array()) throw Malformed{"\"devices\" is not a list"};
    for (const Json& d : devices) report->devices.push_back(device_of(d));
  } catch (const Malformed& m) {
    *error = path + ": " + m.what;
    return false;
  } catch (const nlohmann::json::exception& e) {
    *error = path + ": " + e.what();
    return false;
  }
  return true;
}

const Result* replay_of_run(const RunReport& report, const std::vector<Result>& results) {
  for (const Result& r : results) {
    if (r.policy == report.policy) return &r;
  }
  return nullptr;
}

std::string run_report_lines(const RunReport& report, const std::vector<Result>& results) {
  // What the report says goes to a terminal: made printable.
  const auto text = [](const std::string& s) { return runtime::printable(s, 200); };
  std::string out = "The run itself (" + text(report.path) + ", policy " + text(report.policy) + "):\n";
  const Result* replayed = replay_of_run(report, results);
  for (const RunDevice& d : report.devices) {
    char utilization[32];
    std::snprintf(utilization, sizeof utilization, "%.4f", d.utilization);
    out += "  device " + std::to_string(d.device) + ": peak reserved " + mib(d.peak_reserved_bytes) +
           " MiB for a live peak of " + mib(d.peak_live_bytes) + " MiB, utilization " + utilization + ", " +
           std::to_string(d.allocations) + " allocations, " + std::to_string(d.ooms) + " refused" +
           (d.eviction ? ", " + mib(d.evicted_bytes) + " MiB evicted" : std::string()) + "\n";
    if (!d.owners.empty()) {
      std::string owners;
      for (const RunOwner& o : d.owners) {
        owners += (owners.empty() ? "" : ", ") + (o.library.empty() ? std::string("not known") : text(o.library)) +
                  " (" + text(o.owner) + ") " + mib(o.live_at_peak_bytes) + " MiB";
      }
      out += "    at the live peak: " + owners + "\n";
    }
  }
  if (replayed != nullptr) {
    char utilization[32];
    std::snprintf(utilization, sizeof utilization, "%.4f", replayed->utilization);
    out += "  its replay under " + replayed->policy + ": peak reserved " + mib(replayed->peak_reserved_bytes) +
           " MiB, utilization " + utilization +
           " (the replay sees the trace's order on one simulated device; the run's own lag and streams differ)\n";
  } else {
    out += "  its policy " + text(report.policy) + " was not replayed (add --policy " + text(report.policy) +
           " to set the two side by side)\n";
  }
  return out;
}

}  // namespace tidepool::replay
