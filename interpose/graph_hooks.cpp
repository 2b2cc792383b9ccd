// CUDA graph hooks: cuGraphInstantiateWithFlags, cuGraphInstantiateWithParams,
// cuGraphLaunch (and its _ptsz form), cuGraphExecDestroy. A graph's kernels
// never pass the launch hooks, so with eviction on the runtime scans an
// instantiated graph's kernel nodes and holds the blocks they name on the
// device until the graph is destroyed, and guards each launch of it as a
// launch is guarded (submission.hpp). cudart's cudaGraphInstantiate,
// cudaGraphLaunch and cudaGraphExecDestroy reach these through
// cuGetProcAddress.
#include <cuda.h>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "submission.hpp"

namespace {

void instantiated(CUresult r, const CUgraphExec* exec, CUgraph graph) noexcept {
  if (r != CUDA_SUCCESS || exec == nullptr || !tidepool::interpose::guarding()) return;
  try {
    tidepool::runtime::Runtime::get().graph_instantiated(*exec, graph);
  } catch (...) {
    // Out of host memory: the graph runs unscanned, as before the hooks.
  }
}

template <typename Call>
CUresult guarded_graph_launch(CUgraphExec exec, CUstream stream, Call&& call) {
  if (!tidepool::interpose::guarding()) return call();
  tidepool::runtime::Runtime& rt = tidepool::runtime::Runtime::get();
  tidepool::runtime::Submission submission;
  rt.before_graph_launch(exec, stream, &submission);
  const CUresult r = call();
  rt.after_submission(submission);
  return r;
}

}  // namespace

TIDEPOOL_HOOK CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  auto real = TIDEPOOL_REAL_DRIVER(cuGraphInstantiateWithFlags);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(exec, graph, flags);
  instantiated(r, exec, graph);
  return r;
}

TIDEPOOL_HOOK CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                                    CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  auto real = TIDEPOOL_REAL_DRIVER(cuGraphInstantiateWithParams);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(exec, graph, params);
  instantiated(r, exec, graph);
  return r;
}

TIDEPOOL_HOOK CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  auto real = TIDEPOOL_REAL_DRIVER(cuGraphLaunch);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return guarded_graph_launch(exec, stream, [&] { return real(exec, stream); });
}

TIDEPOOL_HOOK CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  auto real = TIDEPOOL_REAL_DRIVER(cuGraphLaunch_ptsz);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return guarded_graph_launch(exec, stream == nullptr ? CU_STREAM_PER_THREAD : stream,
                              [&] { return real(exec, stream); });
}

TIDEPOOL_HOOK CUresult cuGraphExecDestroy(CUgraphExec exec) {
  auto real = TIDEPOOL_REAL_DRIVER(cuGraphExecDestroy);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (tidepool::interpose::guarding()) tidepool::runtime::Runtime::get().graph_destroying(exec);
  return real(exec);
}
