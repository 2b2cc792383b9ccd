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

// Every submission names its stream before anything else, catches up with
// the barriers its stream was left behind right before the driver call, and
// says when that call has returned. On the legacy stream that is two
// compares, then the runtime's pointer and a load of the mark that makes
// the next barrier record the legacy stream's tail. The first submission on
// another stream ends the pools' legacy-order barriers
// (order/stream_registry.hpp, legacy_only); the catch-up and the mark for
// the next barrier's join are order/stream_followers.hpp's.
class SubmittingOn {
 public:
  explicit SubmittingOn(CUstream stream)
      : stream_(stream),
        slot_(stream != nullptr && stream != CU_STREAM_LEGACY ? runtime::Runtime::get().stream_used(stream) : nullptr) {
  }
  ~SubmittingOn() { runtime::Runtime::get().stream_submitted(slot_); }
  SubmittingOn(const SubmittingOn&) = delete;
  SubmittingOn& operator=(const SubmittingOn&) = delete;
  // The driver call comes next: nothing else is queued for this submission.
  template <typename Call>
  CUresult queue(Call&& call) const {
    if (slot_ != nullptr) runtime::Runtime::get().stream_catching_up(stream_, slot_);
    return call();
  }

 private:
  CUstream stream_;
  order::StreamFollowers::Slot* slot_;
};

// A launch of `function` with these arguments on `stream`.
template <typename Call>
CUresult guarded_launch(CUfunction function, void** params, void** extra, CUstream stream, Call&& call) {
  const SubmittingOn on(stream);
  if (!guarding()) return on.queue(call);
  runtime::Runtime& rt = runtime::Runtime::get();
  runtime::Submission submission;
  try {
    rt.before_launch(function, params, extra, stream, &submission);
  } catch (...) {
    rt.scan_failed();
  }
  const CUresult r = on.queue(call);
  rt.after_submission(submission);
  return r;
}

// A copy or set touching device addresses `first` and `second` (0: none).
template <typename Call>
CUresult guarded_submission(CUdeviceptr first, CUdeviceptr second, CUstream stream, Call&& call) {
  const SubmittingOn on(stream);
  if (!guarding()) return on.queue(call);
  runtime::Runtime& rt = runtime::Runtime::get();
  runtime::Submission submission;
  try {
    rt.before_copy(first, second, stream, &submission);
  } catch (...) {
    rt.scan_failed();
  }
  const CUresult r = on.queue(call);
  rt.after_submission(submission);
  return r;
}

// A batch of copies or stream memory operations on `stream`: `each(visit)`
// calls visit(first, second) with the device addresses of each operation.
template <typename Each, typename Call>
CUresult guarded_batch(CUstream stream, Each&& each, Call&& call) {
  const SubmittingOn on(stream);
  if (!guarding()) return on.queue(call);
  runtime::Runtime& rt = runtime::Runtime::get();
  runtime::Submission submission;
  try {
    each([&](CUdeviceptr first, CUdeviceptr second) {
      rt.before_copy(static_cast<std::uintptr_t>(first), static_cast<std::uintptr_t>(second), stream, &submission);
    });
  } catch (...) {
    rt.scan_failed();
  }
  const CUresult r = on.queue(call);
  rt.after_submission(submission);
  return r;
}

}  // namespace tidepool::interpose
