// CUDA graph hooks: cuGraphInstantiateWithFlags, cuGraphInstantiateWithParams
// and CUDA 11's cuGraphInstantiate_v2, cuGraphExecUpdate and
// cuGraphExecKernelNodeSetParams (both ABI versions), the memcpy, memset,
// child-graph and generic cuGraphExec*NodeSetParams, cuGraphLaunch (and its
// _ptsz form), cuGraphExecDestroy. A graph's kernels, copies and sets never
// pass the submission hooks, so with eviction on the runtime reads an
// instantiated graph's nodes (runtime/graph_holds.hpp) and holds the blocks
// they name on the device until the graph is destroyed, and guards each
// launch of it as a launch is guarded (submission.hpp). cudart's cudaGraphInstantiate,
// cudaGraphLaunch and cudaGraphExecDestroy reach these through
// cuGetProcAddress.
#include <cuda.h>

#include <atomic>
#include <cstddef>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "submission.hpp"

namespace {

void instantiated(CUresult r, const CUgraphExec* exec, CUgraph graph) noexcept {
  if (r != CUDA_SUCCESS || exec == nullptr || !tidepool::interpose::guarding()) return;
  try {
    tidepool::runtime::Runtime::get().graph_instantiated(*exec, graph);
  } catch (...) {
    // Out of host memory: the graph runs unscanned, and may use any block.
    tidepool::runtime::Runtime::get().scan_failed();
  }
}

void kernel_set(CUresult r, CUgraphExec exec, CUfunction function, void** params, void** extra) noexcept {
  if (r != CUDA_SUCCESS || !tidepool::interpose::guarding()) return;
  try {
    tidepool::runtime::Runtime::get().graph_kernel_set(exec, function, params, extra);
  } catch (...) {
    tidepool::runtime::Runtime::get().scan_failed();
  }
}

void copy_set(CUresult r, CUgraphExec exec, CUdeviceptr first, CUdeviceptr second) noexcept {
  if (r != CUDA_SUCCESS || !tidepool::interpose::guarding()) return;
  try {
    tidepool::runtime::Runtime::get().graph_copy_set(exec, first, second);
  } catch (...) {
    tidepool::runtime::Runtime::get().scan_failed();
  }
}

void copy_set(CUresult r, CUgraphExec exec, const CUDA_MEMCPY3D& copy) noexcept {
  const auto [source, destination] = tidepool::runtime::Runtime::copy_addresses(copy);
  copy_set(r, exec, source, destination);
}

template <typename Call>
CUresult guarded_graph_launch(CUgraphExec exec, CUstream stream, Call&& call) {
  const tidepool::interpose::SubmittingOn on(stream);
  if (!tidepool::interpose::guarding()) return on.queue(call);
  tidepool::runtime::Runtime& rt = tidepool::runtime::Runtime::get();
  tidepool::runtime::Submission submission;
  try {
    rt.before_graph_launch(exec, stream, &submission);
  } catch (...) {
    // What was pinned before the throw is released below all the same.
    rt.scan_failed();
  }
  const CUresult r = on.queue(call);
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

// The instantiation of CUDA 11 (cudart 11.x hands it out), which cuda.h
// renames away.
TIDEPOOL_HOOK CUresult tidepool_cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node,
                                                      char* log, std::size_t log_size) {
  static std::atomic<void*> slot{nullptr};
  auto real = tidepool::interpose::real_driver<CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, std::size_t)>(
      "cuGraphInstantiate_v2", slot);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(exec, graph, error_node, log, log_size);
  instantiated(r, exec, graph);
  return r;
}

// An update gives the graph's kernels new arguments: their blocks are held
// too (those of the old ones until the graph is destroyed).
TIDEPOOL_HOOK CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  auto real = TIDEPOOL_REAL_DRIVER(cuGraphExecUpdate_v2);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(exec, graph, info);
  instantiated(r, &exec, graph);
  return r;
}

TIDEPOOL_HOOK CUresult tidepool_cuGraphExecUpdate_v1(CUgraphExec exec, CUgraph graph, CUgraphNode* error_node,
                                                     CUgraphExecUpdateResult* result) {
  static std::atomic<void*> slot{nullptr};
  auto real =
      tidepool::interpose::real_driver<CUresult (*)(CUgraphExec, CUgraph, CUgraphNode*, CUgraphExecUpdateResult*)>(
          "cuGraphExecUpdate", slot);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(exec, graph, error_node, result);
  instantiated(r, &exec, graph);
  return r;
}

TIDEPOOL_HOOK CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                         const CUDA_KERNEL_NODE_PARAMS* params) {
  auto real = TIDEPOOL_REAL_DRIVER(cuGraphExecKernelNodeSetParams_v2);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(exec, node, params);
  if (params != nullptr) {
    // A library kernel's node names it in `kern`, read when `func` is null.
    const CUfunction function = params->func != nullptr ? params->func : reinterpret_cast<CUfunction>(params->kern);
    kernel_set(r, exec, function, params->kernelParams, params->extra);
  }
  return r;
}

TIDEPOOL_HOOK CUresult tidepool_cuGraphExecKernelNodeSetParams_v1(CUgraphExec exec, CUgraphNode node,
                                                                  const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  static std::atomic<void*> slot{nullptr};
  auto real =
      tidepool::interpose::real_driver<CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1*)>(
          "cuGraphExecKernelNodeSetParams", slot);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(exec, node, params);
  if (params != nullptr) kernel_set(r, exec, params->func, params->kernelParams, params->extra);
  return r;
}

TIDEPOOL_HOOK CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* copy,
                                                      CUcontext context) {
  auto real = TIDEPOOL_REAL_DRIVER(cuGraphExecMemcpyNodeSetParams);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(exec, node, copy, context);
  if (copy != nullptr) copy_set(r, exec, *copy);
  return r;
}

TIDEPOOL_HOOK CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                      const CUDA_MEMSET_NODE_PARAMS* set, CUcontext context) {
  auto real = TIDEPOOL_REAL_DRIVER(cuGraphExecMemsetNodeSetParams);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(exec, node, set, context);
  if (set != nullptr) copy_set(r, exec, set->dst, 0);
  return r;
}

TIDEPOOL_HOOK CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraph child) {
  auto real = TIDEPOOL_REAL_DRIVER(cuGraphExecChildGraphNodeSetParams);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(exec, node, child);
  instantiated(r, &exec, child);
  return r;
}

// The generic form (CUDA 12.2): by the node type the parameters give.
TIDEPOOL_HOOK CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* params) {
  auto real = TIDEPOOL_REAL_DRIVER(cuGraphExecNodeSetParams);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = real(exec, node, params);
  if (params == nullptr) return r;
  switch (params->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      kernel_set(r, exec, params->kernel.func, params->kernel.kernelParams, params->kernel.extra);
      break;
    case CU_GRAPH_NODE_TYPE_MEMCPY: copy_set(r, exec, params->memcpy.copyParams); break;
    case CU_GRAPH_NODE_TYPE_MEMSET: copy_set(r, exec, params->memset.dst, 0); break;
    case CU_GRAPH_NODE_TYPE_GRAPH: instantiated(r, &exec, params->graph.graph); break;
    default: break;
  }
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
  return guarded_graph_launch(exec, tidepool::interpose::per_thread_default(stream),
                              [&] { return real(exec, stream); });
}

TIDEPOOL_HOOK CUresult cuGraphExecDestroy(CUgraphExec exec) {
  auto real = TIDEPOOL_REAL_DRIVER(cuGraphExecDestroy);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (tidepool::interpose::guarding()) tidepool::runtime::Runtime::get().graph_destroying(exec);
  return real(exec);
}
