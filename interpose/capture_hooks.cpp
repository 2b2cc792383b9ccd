// Capture hooks: every ABI cuda.h has named that begins a stream capture
// (cuStreamBeginCapture in its 10.0 and 10.1 forms, cuStreamBeginCaptureToGraph,
// each with its per-thread form). They tell the runtime before the driver is
// called, so that the routes ask the driver whether a stream is capturing
// only once some capture may have begun (runtime::Runtime::capture_possible).
// A begin-capture entry point the table does not know, handed out by
// cuGetProcAddress or dlsym, makes a capture possible for good
// (capture_entry_resolved).
#include <cuda.h>

#include <atomic>
#include <cstring>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "route.hpp"
#include "runtime/runtime.hpp"

namespace tidepool::interpose {

namespace {

void capture_beginning() {
  if (serving()) runtime::Runtime::get().capture_beginning();
}

}  // namespace

void capture_entry_resolved(const char* name, bool hooked) {
  constexpr const char kBegin[] = "cuStreamBeginCapture";
  if (hooked || name == nullptr || std::strncmp(name, kBegin, sizeof(kBegin) - 1) != 0) return;
  capture_beginning();
}

}  // namespace tidepool::interpose

TIDEPOOL_HOOK CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  tidepool::interpose::capture_beginning();
  return TIDEPOOL_CALL_REAL_DRIVER(cuStreamBeginCapture_v2, stream, mode);
}

TIDEPOOL_HOOK CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode) {
  tidepool::interpose::capture_beginning();
  return TIDEPOOL_CALL_REAL_DRIVER(cuStreamBeginCapture_v2_ptsz, stream, mode);
}

TIDEPOOL_HOOK CUresult cuStreamBeginCaptureToGraph(CUstream stream, CUgraph graph, const CUgraphNode* dependencies,
                                                   const CUgraphEdgeData* edges, std::size_t count,
                                                   CUstreamCaptureMode mode) {
  tidepool::interpose::capture_beginning();
  return TIDEPOOL_CALL_REAL_DRIVER(cuStreamBeginCaptureToGraph, stream, graph, dependencies, edges, count, mode);
}

TIDEPOOL_HOOK CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream stream, CUgraph graph, const CUgraphNode* dependencies,
                                                        const CUgraphEdgeData* edges, std::size_t count,
                                                        CUstreamCaptureMode mode) {
  tidepool::interpose::capture_beginning();
  return TIDEPOOL_CALL_REAL_DRIVER(cuStreamBeginCaptureToGraph_ptsz, stream, graph, dependencies, edges, count, mode);
}

// The 10.0 form, without a mode (the driver captures in global mode).
TIDEPOOL_HOOK CUresult tidepool_cuStreamBeginCapture_v1(CUstream stream) {
  static std::atomic<void*> slot{nullptr};
  auto real = tidepool::interpose::real_driver<CUresult (*)(CUstream)>("cuStreamBeginCapture", slot);
  tidepool::interpose::capture_beginning();
  return real != nullptr ? real(stream) : CUDA_ERROR_NOT_INITIALIZED;
}

TIDEPOOL_HOOK CUresult tidepool_cuStreamBeginCapture_v1_ptsz(CUstream stream) {
  static std::atomic<void*> slot{nullptr};
  auto real = tidepool::interpose::real_driver<CUresult (*)(CUstream)>("cuStreamBeginCapture_ptsz", slot);
  tidepool::interpose::capture_beginning();
  return real != nullptr ? real(stream) : CUDA_ERROR_NOT_INITIALIZED;
}
