// The table of driver functions behind each DriverCalls field: one place, so
// reading, subtracting and naming can never disagree on the order.
#include "driver_calls.hpp"

#include <array>

namespace tidepool::replay {

namespace {

struct Field {
  std::uint64_t DriverCalls::*member;
  const char* key;          // the report's name
  const char* driver_name;  // the exported driver function the sim counts
};

constexpr std::array<Field, 12> kFields = {{
    {&DriverCalls::creates, "creates", "cuMemCreate"},
    {&DriverCalls::maps, "maps", "cuMemMap"},
    {&DriverCalls::set_access, "set_access", "cuMemSetAccess"},
    {&DriverCalls::unmaps, "unmaps", "cuMemUnmap"},
    {&DriverCalls::releases, "releases", "cuMemRelease"},
    {&DriverCalls::context_syncs, "context_syncs", "cuCtxSynchronize"},
    {&DriverCalls::stream_syncs, "stream_syncs", "cuStreamSynchronize"},
    {&DriverCalls::event_records, "event_records", "cuEventRecord"},
    {&DriverCalls::event_queries, "event_queries", "cuEventQuery"},
    {&DriverCalls::event_syncs, "event_syncs", "cuEventSynchronize"},
    {&DriverCalls::stream_waits, "stream_waits", "cuStreamWaitEvent"},
    {&DriverCalls::mem_allocs, "mem_allocs", "cuMemAlloc_v2"},
}};

}  // namespace

DriverCalls& DriverCalls::operator+=(const DriverCalls& other) {
  for (const Field& f : kFields) this->*f.member += other.*f.member;
  return *this;
}

DriverCalls& DriverCalls::operator-=(const DriverCalls& other) {
  for (const Field& f : kFields) this->*f.member -= other.*f.member;
  return *this;
}

std::vector<std::pair<std::string, std::uint64_t>> named_counts(const DriverCalls& calls) {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  out.reserve(kFields.size());
  for (const Field& f : kFields) out.emplace_back(f.key, calls.*f.member);
  return out;
}

DriverCalls read_sim_calls(SimCallCount count) {
  DriverCalls calls;
  if (count == nullptr) return calls;
  for (const Field& f : kFields) calls.*f.member = count(f.driver_name);
  return calls;
}

}  // namespace tidepool::replay
