// Peer-access hooks: cuCtxEnablePeerAccess, cuCtxDisablePeerAccess and
// cuMemPoolSetAccess (the runtime's cudaDeviceEnablePeerAccess and
// cudaMemPoolSetAccess reach them through the driver table). The driver opens a peer's cuMemAlloc memory itself; the
// pool's pages are VMM mappings that answer only to their access lists, so the runtime grants the peer those too. The
// driver's answer comes first; if the pool then cannot follow, the driver's change is undone and the call fails, so a
// program never believes in access its kernels would fault on.
#include <cuda.h>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "route.hpp"
#include "runtime/runtime.hpp"
#include "translate.hpp"

TIDEPOOL_HOOK CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  const CUresult r = TIDEPOOL_CALL_REAL_DRIVER(cuCtxEnablePeerAccess, peer, flags);
  if (r != CUDA_SUCCESS || !tidepool::interpose::serving()) return r;
  const tidepool::util::Status s = tidepool::runtime::Runtime::get().peer_access_changed(peer, true);
  if (s) return CUDA_SUCCESS;
  (void)TIDEPOOL_CALL_REAL_DRIVER(cuCtxDisablePeerAccess, peer);
  return tidepool::interpose::to_curesult(s);
}

// The default memory pool opened to other devices (cudaMemPoolSetAccess, as
// PyTorch's cudaMallocAsync backend and RMM grant peers): tidepool serves
// that pool's allocations, so its pages follow. Not undone on failure (the
// driver has no single call that restores a pool's previous list).
TIDEPOOL_HOOK CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, std::size_t count) {
  const CUresult r = TIDEPOOL_CALL_REAL_DRIVER(cuMemPoolSetAccess, pool, map, count);
  if (r != CUDA_SUCCESS || !tidepool::interpose::serving()) return r;
  const tidepool::util::Status s = tidepool::runtime::Runtime::get().memory_pool_access_changed(pool, map, count);
  return s ? CUDA_SUCCESS : tidepool::interpose::to_curesult(s);
}

TIDEPOOL_HOOK CUresult cuCtxDisablePeerAccess(CUcontext peer) {
  const CUresult r = TIDEPOOL_CALL_REAL_DRIVER(cuCtxDisablePeerAccess, peer);
  if (r != CUDA_SUCCESS || !tidepool::interpose::serving()) return r;
  const tidepool::util::Status s = tidepool::runtime::Runtime::get().peer_access_changed(peer, false);
  if (s) return CUDA_SUCCESS;
  (void)TIDEPOOL_CALL_REAL_DRIVER(cuCtxEnablePeerAccess, peer, 0);
  return tidepool::interpose::to_curesult(s);
}
