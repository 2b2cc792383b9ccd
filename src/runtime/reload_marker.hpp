// Reload marker: what one load of libtidepool leaves for the next load in
// the same process, so that a plugin that is dlclosed and dlopened again
// keeps one trace instead of truncating it at each load.
//
// Everything tidepool holds goes away at dlclose, so the record lives outside
// it: a small memfd named "tidepool-reload", kept open (close-on-exec) from
// one unload to the next load, which reads and closes it. That one
// descriptor is all tidepool leaves behind. It holds the pid (a forked child
// never continues its parent's trace), the trace's path, and the steady-clock
// instant its times count from (so they keep rising across loads).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tidepool::runtime {

struct TraceContinuation {
  std::string path;
  std::int64_t start_ns = 0;  // steady_clock, since its epoch
};

// Leaves `trace` for the next load of this process (best effort).
void leave_reload_marker(const TraceContinuation& trace) noexcept;
// Takes the record an earlier load of this process left, if any.
std::optional<TraceContinuation> take_reload_marker() noexcept;

}  // namespace tidepool::runtime
