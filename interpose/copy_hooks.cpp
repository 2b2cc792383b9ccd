// Copy and set hooks: cuMemcpy*, cuMemset* (synchronous and async, their
// per-thread-stream forms, peer, 2D and 3D, to and from CUDA arrays), and the stream writes and waits
// cuStreamWriteValue32/64, cuStreamWaitValue32/64 (a word written, or read
// until it holds, in stream order). With eviction on, the device
// addresses each one touches go to the runtime before the driver is called,
// exactly as a launch's arguments do (launch_hooks.cpp): the pool blocks
// they fall in are marked used and pinned until the call has returned, and
// under prefetch:launch or learn their host pages come back first. The
// runtime API's cudaMemcpy and cudaMemset reach the driver through
// cuGetProcAddress, where these same hooks are substituted.
//
// The stream a call is ordered on: the one it names; for the synchronous
// forms the legacy stream, or the calling thread's default stream for the
// _ptds forms (CU_STREAM_PER_THREAD), as the driver orders them.
#include <cuda.h>

#include <atomic>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "submission.hpp"

namespace {

CUdeviceptr device_side(CUmemorytype type, CUdeviceptr device) {
  return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED ? device : 0;
}

template <typename Descriptor>
CUdeviceptr destination(const Descriptor* d) {
  return d == nullptr ? 0 : device_side(d->dstMemoryType, d->dstDevice);
}

template <typename Descriptor>
CUdeviceptr source(const Descriptor* d) {
  return d == nullptr ? 0 : device_side(d->srcMemoryType, d->srcDevice);
}

}  // namespace

using tidepool::interpose::guarded_submission;
using tidepool::interpose::per_thread_default;

// Calls the real driver's `symbol` with the hook's arguments, the device
// addresses `first` and `second` guarded on `stream` around it.
#define TIDEPOOL_GUARDED_COPY(symbol, first, second, stream, ...)                                      \
  auto real = TIDEPOOL_REAL_DRIVER(symbol);                                                            \
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;                                                    \
  return guarded_submission(static_cast<CUdeviceptr>(first), static_cast<CUdeviceptr>(second), stream, \
                            [&] { return real(__VA_ARGS__); })

// One-dimensional copies.
TIDEPOOL_HOOK CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy, dst, src, nullptr, dst, src, n);
}
TIDEPOOL_HOOK CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy_ptds, dst, src, CU_STREAM_PER_THREAD, dst, src, n);
}
TIDEPOOL_HOOK CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, std::size_t n, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyAsync, dst, src, s, dst, src, n, s);
}
TIDEPOOL_HOOK CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, std::size_t n, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyAsync_ptsz, dst, src, per_thread_default(s), dst, src, n, s);
}
TIDEPOOL_HOOK CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyHtoD_v2, dst, 0, nullptr, dst, src, n);
}
TIDEPOOL_HOOK CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyHtoD_v2_ptds, dst, 0, CU_STREAM_PER_THREAD, dst, src, n);
}
TIDEPOOL_HOOK CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyDtoH_v2, src, 0, nullptr, dst, src, n);
}
TIDEPOOL_HOOK CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyDtoH_v2_ptds, src, 0, CU_STREAM_PER_THREAD, dst, src, n);
}
TIDEPOOL_HOOK CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyDtoD_v2, dst, src, nullptr, dst, src, n);
}
TIDEPOOL_HOOK CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyDtoD_v2_ptds, dst, src, CU_STREAM_PER_THREAD, dst, src, n);
}
TIDEPOOL_HOOK CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, std::size_t n, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyHtoDAsync_v2, dst, 0, s, dst, src, n, s);
}
TIDEPOOL_HOOK CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, std::size_t n, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyHtoDAsync_v2_ptsz, dst, 0, per_thread_default(s), dst, src, n, s);
}
// Between device memory and a CUDA array: only the pointer's side can be a pool's.
TIDEPOOL_HOOK CUresult cuMemcpyDtoA_v2(CUarray dst, std::size_t dst_offset, CUdeviceptr src, std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyDtoA_v2, src, 0, nullptr, dst, dst_offset, src, n);
}
TIDEPOOL_HOOK CUresult cuMemcpyDtoA_v2_ptds(CUarray dst, std::size_t dst_offset, CUdeviceptr src, std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyDtoA_v2_ptds, src, 0, CU_STREAM_PER_THREAD, dst, dst_offset, src, n);
}
TIDEPOOL_HOOK CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, std::size_t src_offset, std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyAtoD_v2, dst, 0, nullptr, dst, src, src_offset, n);
}
TIDEPOOL_HOOK CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, std::size_t src_offset, std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyAtoD_v2_ptds, dst, 0, CU_STREAM_PER_THREAD, dst, src, src_offset, n);
}
TIDEPOOL_HOOK CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, std::size_t n, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyDtoHAsync_v2, src, 0, s, dst, src, n, s);
}
TIDEPOOL_HOOK CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, std::size_t n, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyDtoHAsync_v2_ptsz, src, 0, per_thread_default(s), dst, src, n, s);
}
TIDEPOOL_HOOK CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, std::size_t n, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyDtoDAsync_v2, dst, src, s, dst, src, n, s);
}
TIDEPOOL_HOOK CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, std::size_t n, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyDtoDAsync_v2_ptsz, dst, src, per_thread_default(s), dst, src, n, s);
}
TIDEPOOL_HOOK CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                    std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyPeer, dst, src, nullptr, dst, dst_ctx, src, src_ctx, n);
}
TIDEPOOL_HOOK CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                         std::size_t n) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyPeer_ptds, dst, src, CU_STREAM_PER_THREAD, dst, dst_ctx, src, src_ctx, n);
}
TIDEPOOL_HOOK CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                         std::size_t n, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyPeerAsync, dst, src, s, dst, dst_ctx, src, src_ctx, n, s);
}
TIDEPOOL_HOOK CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                              std::size_t n, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpyPeerAsync_ptsz, dst, src, per_thread_default(s), dst, dst_ctx, src, src_ctx, n, s);
}

// Two- and three-dimensional copies: the device sides their descriptors name.
TIDEPOOL_HOOK CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* d) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy2D_v2, destination(d), source(d), nullptr, d);
}
TIDEPOOL_HOOK CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* d) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy2D_v2_ptds, destination(d), source(d), CU_STREAM_PER_THREAD, d);
}
TIDEPOOL_HOOK CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* d) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy2DUnaligned_v2, destination(d), source(d), nullptr, d);
}
TIDEPOOL_HOOK CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* d) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy2DUnaligned_v2_ptds, destination(d), source(d), CU_STREAM_PER_THREAD, d);
}
TIDEPOOL_HOOK CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* d, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy2DAsync_v2, destination(d), source(d), s, d, s);
}
TIDEPOOL_HOOK CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* d, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy2DAsync_v2_ptsz, destination(d), source(d), per_thread_default(s), d, s);
}
TIDEPOOL_HOOK CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* d) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy3D_v2, destination(d), source(d), nullptr, d);
}
TIDEPOOL_HOOK CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* d) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy3D_v2_ptds, destination(d), source(d), CU_STREAM_PER_THREAD, d);
}
TIDEPOOL_HOOK CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* d, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy3DAsync_v2, destination(d), source(d), s, d, s);
}
TIDEPOOL_HOOK CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* d, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy3DAsync_v2_ptsz, destination(d), source(d), per_thread_default(s), d, s);
}

TIDEPOOL_HOOK CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* d) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy3DPeer, destination(d), source(d), nullptr, d);
}
TIDEPOOL_HOOK CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* d) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy3DPeer_ptds, destination(d), source(d), CU_STREAM_PER_THREAD, d);
}
TIDEPOOL_HOOK CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* d, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy3DPeerAsync, destination(d), source(d), s, d, s);
}
TIDEPOOL_HOOK CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* d, CUstream s) {
  TIDEPOOL_GUARDED_COPY(cuMemcpy3DPeerAsync_ptsz, destination(d), source(d), per_thread_default(s), d, s);
}

// Sets. One macro per width: the synchronous, per-thread, async and
// per-thread async forms, 1D and 2D.
#define TIDEPOOL_SET_HOOKS(width, value_type)                                                                          \
  TIDEPOOL_HOOK CUresult cuMemsetD##width##_v2(CUdeviceptr dst, value_type v, std::size_t n) {                         \
    TIDEPOOL_GUARDED_COPY(cuMemsetD##width##_v2, dst, 0, nullptr, dst, v, n);                                          \
  }                                                                                                                    \
  TIDEPOOL_HOOK CUresult cuMemsetD##width##_v2_ptds(CUdeviceptr dst, value_type v, std::size_t n) {                    \
    TIDEPOOL_GUARDED_COPY(cuMemsetD##width##_v2_ptds, dst, 0, CU_STREAM_PER_THREAD, dst, v, n);                        \
  }                                                                                                                    \
  TIDEPOOL_HOOK CUresult cuMemsetD##width##Async(CUdeviceptr dst, value_type v, std::size_t n, CUstream s) {           \
    TIDEPOOL_GUARDED_COPY(cuMemsetD##width##Async, dst, 0, s, dst, v, n, s);                                           \
  }                                                                                                                    \
  TIDEPOOL_HOOK CUresult cuMemsetD##width##Async_ptsz(CUdeviceptr dst, value_type v, std::size_t n, CUstream s) {      \
    TIDEPOOL_GUARDED_COPY(cuMemsetD##width##Async_ptsz, dst, 0, per_thread_default(s), dst, v, n, s);                  \
  }                                                                                                                    \
  TIDEPOOL_HOOK CUresult cuMemsetD2D##width##_v2(CUdeviceptr dst, std::size_t pitch, value_type v, std::size_t w,      \
                                                 std::size_t h) {                                                      \
    TIDEPOOL_GUARDED_COPY(cuMemsetD2D##width##_v2, dst, 0, nullptr, dst, pitch, v, w, h);                              \
  }                                                                                                                    \
  TIDEPOOL_HOOK CUresult cuMemsetD2D##width##_v2_ptds(CUdeviceptr dst, std::size_t pitch, value_type v, std::size_t w, \
                                                      std::size_t h) {                                                 \
    TIDEPOOL_GUARDED_COPY(cuMemsetD2D##width##_v2_ptds, dst, 0, CU_STREAM_PER_THREAD, dst, pitch, v, w, h);            \
  }                                                                                                                    \
  TIDEPOOL_HOOK CUresult cuMemsetD2D##width##Async(CUdeviceptr dst, std::size_t pitch, value_type v, std::size_t w,    \
                                                   std::size_t h, CUstream s) {                                        \
    TIDEPOOL_GUARDED_COPY(cuMemsetD2D##width##Async, dst, 0, s, dst, pitch, v, w, h, s);                               \
  }                                                                                                                    \
  TIDEPOOL_HOOK CUresult cuMemsetD2D##width##Async_ptsz(CUdeviceptr dst, std::size_t pitch, value_type v,              \
                                                        std::size_t w, std::size_t h, CUstream s) {                    \
    TIDEPOOL_GUARDED_COPY(cuMemsetD2D##width##Async_ptsz, dst, 0, per_thread_default(s), dst, pitch, v, w, h, s);      \
  }

TIDEPOOL_SET_HOOKS(8, unsigned char)
TIDEPOOL_SET_HOOKS(16, unsigned short)
TIDEPOOL_SET_HOOKS(32, unsigned int)

// Stream writes and waits: one word at `addr`, in stream order (the _v2
// forms cuda.h names, and the v1 forms of the pre-11.7 ABI below). A wait
// reads the word until it holds. Batches of them, cuMemcpyBatchAsync and
// cuMemcpy3DBatchAsync are in batch_hooks.cpp.
TIDEPOOL_HOOK CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  TIDEPOOL_GUARDED_COPY(cuStreamWriteValue32_v2, addr, 0, s, s, addr, value, flags);
}
TIDEPOOL_HOOK CUresult cuStreamWriteValue32_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                                    unsigned int flags) {
  TIDEPOOL_GUARDED_COPY(cuStreamWriteValue32_v2_ptsz, addr, 0, per_thread_default(s), s, addr, value, flags);
}
TIDEPOOL_HOOK CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  TIDEPOOL_GUARDED_COPY(cuStreamWriteValue64_v2, addr, 0, s, s, addr, value, flags);
}
TIDEPOOL_HOOK CUresult cuStreamWriteValue64_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                                    unsigned int flags) {
  TIDEPOOL_GUARDED_COPY(cuStreamWriteValue64_v2_ptsz, addr, 0, per_thread_default(s), s, addr, value, flags);
}
TIDEPOOL_HOOK CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  TIDEPOOL_GUARDED_COPY(cuStreamWaitValue32_v2, addr, 0, s, s, addr, value, flags);
}
TIDEPOOL_HOOK CUresult cuStreamWaitValue32_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  TIDEPOOL_GUARDED_COPY(cuStreamWaitValue32_v2_ptsz, addr, 0, per_thread_default(s), s, addr, value, flags);
}
TIDEPOOL_HOOK CUresult cuStreamWaitValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  TIDEPOOL_GUARDED_COPY(cuStreamWaitValue64_v2, addr, 0, s, s, addr, value, flags);
}
TIDEPOOL_HOOK CUresult cuStreamWaitValue64_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  TIDEPOOL_GUARDED_COPY(cuStreamWaitValue64_v2_ptsz, addr, 0, per_thread_default(s), s, addr, value, flags);
}

// The pre-11.7 ABI, which cuda.h renames to the _v2 forms above; the same
// arguments, looked up by their own names.
#define TIDEPOOL_MEM_OP_V1(hook, exported, word, stream)                                                               \
  TIDEPOOL_HOOK CUresult hook(CUstream s, CUdeviceptr addr, word value, unsigned int flags) {                          \
    static std::atomic<void*> slot{nullptr};                                                                           \
    auto real = tidepool::interpose::real_driver<CUresult (*)(CUstream, CUdeviceptr, word, unsigned)>(exported, slot); \
    if (real == nullptr) return CUDA_ERROR_NOT_FOUND;                                                                  \
    return guarded_submission(addr, 0, stream, [&] { return real(s, addr, value, flags); });                           \
  }
TIDEPOOL_MEM_OP_V1(tidepool_cuStreamWriteValue32_v1, "cuStreamWriteValue32", cuuint32_t, s)
TIDEPOOL_MEM_OP_V1(tidepool_cuStreamWriteValue32_v1_ptsz, "cuStreamWriteValue32_ptsz", cuuint32_t,
                   per_thread_default(s))
TIDEPOOL_MEM_OP_V1(tidepool_cuStreamWriteValue64_v1, "cuStreamWriteValue64", cuuint64_t, s)
TIDEPOOL_MEM_OP_V1(tidepool_cuStreamWriteValue64_v1_ptsz, "cuStreamWriteValue64_ptsz", cuuint64_t,
                   per_thread_default(s))
TIDEPOOL_MEM_OP_V1(tidepool_cuStreamWaitValue32_v1, "cuStreamWaitValue32", cuuint32_t, s)
TIDEPOOL_MEM_OP_V1(tidepool_cuStreamWaitValue32_v1_ptsz, "cuStreamWaitValue32_ptsz", cuuint32_t, per_thread_default(s))
TIDEPOOL_MEM_OP_V1(tidepool_cuStreamWaitValue64_v1, "cuStreamWaitValue64", cuuint64_t, s)
TIDEPOOL_MEM_OP_V1(tidepool_cuStreamWaitValue64_v1_ptsz, "cuStreamWaitValue64_ptsz", cuuint64_t, per_thread_default(s))
#undef TIDEPOOL_MEM_OP_V1
