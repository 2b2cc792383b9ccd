// Guarding a submission (a kernel launch, a copy, a set) while it goes to
// the driver: with eviction on, the runtime pins the pool blocks it names
// before the real call and releases them after it (see pool/page_mover.hpp
// for the rule this keeps); otherwise the call goes straight through. A scan
// that cannot run (out of host memory) leaves the call as it was.
#pragma once

#include <cuda.h>

#include "route.hpp"
#include "runtime/runtime.hpp"

namespace tidepool::interpose {

// Whether submissions are guarded at all: one load and a compare when not.
inline bool guarding() { return serving() && runtime::Runtime::get().guards_submissions(); }

// A launch of `function` with these arguments on `stream`.
template <typename Call>
CUresult guarded_launch(CUfunction function, void** params, void** extra, CUstream stream, Call&& call) {
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

}  // namespace tidepool::interpose
