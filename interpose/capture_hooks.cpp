// Capture hooks: every ABI cuda.h has named that begins a stream capture
// (cuStreamBeginCapture in its 10.0 and 10.1 forms, cuStreamBeginCaptureToGraph,
// each with its per-thread form). They tell the runtime before the driver is
// called, so that the routes ask the driver whether a stream is capturing
// only once some capture may have begun (runtime::Runtime::capture_possible).
// cuStreamEndCapture tells it too: a capture begun some way no hook saw is
// then missed once at most. A begin-capture entry point the table does not
// know, handed out by cuGetProcAddress or dlsym, makes a capture possible for
// good (capture_entry_resolved), and so does a driver already in use when
// tidepool was loaded (a capture may have begun before any hook existed).
#include <cuda.h>
#include <dlfcn.h>

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

// Set at load: the driver was initialised before tidepool's constructors ran
// (tidepool loaded into a process already using CUDA).
bool driver_in_use_at_load = false;

__attribute__((constructor)) void note_driver_at_load() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return;
  DlsymFn find = real_dlsym();
  using CtxGetCurrent = CUresult (*)(CUcontext*);
  auto get_current = find != nullptr ? reinterpret_cast<CtxGetCurrent>(find(lib, "cuCtxGetCurrent")) : nullptr;
  CUcontext context = nullptr;
  driver_in_use_at_load = get_current == nullptr || get_current(&context) != CUDA_ERROR_NOT_INITIALIZED;
  dlclose(lib);
}

bool capture_hooks_in_front() {
  DlsymFn real = real_dlsym();
  if (real == nullptr || driver_in_use_at_load) return false;
  auto ours = [&](const char* name, const void* hook) { return real(RTLD_DEFAULT, name) == hook; };
  return ours("cuStreamBeginCapture", reinterpret_cast<void*>(&::tidepool_cuStreamBeginCapture_v1)) &&
         ours("cuStreamBeginCapture_ptsz", reinterpret_cast<void*>(&::tidepool_cuStreamBeginCapture_v1_ptsz)) &&
         ours("cuStreamBeginCapture_v2", reinterpret_cast<void*>(&::cuStreamBeginCapture_v2)) &&
         ours("cuStreamBeginCapture_v2_ptsz", reinterpret_cast<void*>(&::cuStreamBeginCapture_v2_ptsz)) &&
         ours("cuStreamBeginCaptureToGraph", reinterpret_cast<void*>(&::cuStreamBeginCaptureToGraph)) &&
         ours("cuStreamBeginCaptureToGraph_ptsz", reinterpret_cast<void*>(&::cuStreamBeginCaptureToGraph_ptsz));
}

__attribute__((constructor)) void register_capture_probe() { runtime::set_capture_probe(&capture_hooks_in_front); }

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

TIDEPOOL_HOOK CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  tidepool::interpose::capture_beginning();
  return TIDEPOOL_CALL_REAL_DRIVER(cuStreamEndCapture, stream, graph);
}

TIDEPOOL_HOOK CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph) {
  tidepool::interpose::capture_beginning();
  return TIDEPOOL_CALL_REAL_DRIVER(cuStreamEndCapture_ptsz, stream, graph);
}
