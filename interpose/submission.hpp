// Guarding a submission (a kernel launch, a copy, a set) while it goes to
// the driver: with eviction on, the runtime pins the pool blocks it names
// before the real call and releases them after it (see pool/page_mover.hpp
// for the rule this keeps); otherwise the call goes straight through. A scan
// that cannot run (out of host memory) leaves the call as it was. Either
// way the runtime first hears which stream the work goes on.
#pragma once

#include <cuda.h>

#include "route.hpp"
#include "runtime/runtime.hpp"

namespace tidepool::interpose {

// Whether submissions are guarded at all: one load and a compare when not.
inline bool guarding() { return serving() && runtime::Runtime::get().guards_submissions(); }

// Every submission names its stream before it is queued; on the legacy
// stream, two compares. The first on another stream ends the pools'
// legacy-order barriers (order/stream_registry.hpp, legacy_only).
inline void submitting_on(CUstream stream) {
  if (stream != nullptr && stream != CU_STREAM_LEGACY) runtime::Runtime::get().stream_used(stream);
}

// A launch of `function` with these arguments on `stream`.
template <typename Call>
CUresult guarded_launch(CUfunction function, void** params, void** extra, CUstream stream, Call&& call) {
  submitting_on(stream);
  if (!guarding()) return call();
  runtime::Runtime& rt = runtime::Runtime::get();
  runtime::Submission submission;
  try {
    rt.before_launch(function, params, extra, stream, &submission);
  } catch (...) {
    rt.scan_failed();
  }
  const CUresult r = call();
  rt.after_submission(submission);
  return r;
}

// A copy or set touching device addresses `first` and `second` (0: none).
template <typename Call>
CUresult guarded_submission(CUdeviceptr first, CUdeviceptr second, CUstream stream, Call&& call) {
  submitting_on(stream);
  if (!guarding()) return call();
  runtime::Runtime& rt = runtime::Runtime::get();
  runtime::Submission submission;
  try {
    rt.before_copy(first, second, stream, &submission);
  } catch (...) {
    rt.scan_failed();
  }
  const CUresult r = call();
  rt.after_submission(submission);
  return r;
}

// A batch of copies or stream memory operations on `stream`: `each(visit)`
// calls visit(first, second) with the device addresses of each operation.
template <typename Each, typename Call>
CUresult guarded_batch(CUstream stream, Each&& each, Call&& call) {
  submitting_on(stream);
  if (!guarding()) return call();
  runtime::Runtime& rt = runtime::Runtime::get();
  runtime::Submission submission;
  try {
    each([&](CUdeviceptr first, CUdeviceptr second) {
      rt.before_copy(static_cast<std::uintptr_t>(first), static_cast<std::uintptr_t>(second), stream, &submission);
    });
  } catch (...) {
    rt.scan_failed();
  }
  const CUresult r = call();
  rt.after_submission(submission);
  return r;
}

}  // namespace tidepool::interpose
