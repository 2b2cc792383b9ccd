// Batched submissions: cuStreamBatchMemOp (the _v2 ABI, the pre-11.7 one,
// and their per-thread forms), cuMemcpyBatchAsync and cuMemcpy3DBatchAsync
// (CUDA 12.8's, with failIdx, and 13.0's _v2, each with its per-thread
// form). Each names its stream before it is queued,
// as every submission does (submission.hpp), and under eviction guards the
// device addresses of all its operations, as a single copy's are guarded.
// Of a 3D copy's operands only pointers can be a pool's; a copy is guarded
// by where it begins, as a 2D or 3D copy is. The batch copies never run on
// the legacy stream, so a program that uses
// it has work on another stream: the pools' legacy-order barriers end.
#include <cuda.h>

#include <cstring>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "submission.hpp"

namespace {

using tidepool::interpose::guarded_batch;
using tidepool::interpose::per_thread_default;

// A wait reads its word and a write writes it; a flush or a barrier names
// no memory. The tag is read as the caller wrote it: a bad one is the
// driver's to refuse, and is no enumerator to load.
template <typename Visit>
void visit_mem_ops(unsigned count, const CUstreamBatchMemOpParams* ops, Visit&& visit) {
  if (ops == nullptr) return;
  for (unsigned i = 0; i < count; ++i) {
    unsigned operation = 0;
    std::memcpy(&operation, &ops[i], sizeof operation);
    switch (operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      case CU_STREAM_MEM_OP_WAIT_VALUE_64: visit(ops[i].waitValue.address, 0); break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      case CU_STREAM_MEM_OP_WRITE_VALUE_64: visit(ops[i].writeValue.address, 0); break;
      default: break;
    }
  }
}

template <typename Visit>
void visit_copies(const CUdeviceptr* dsts, const CUdeviceptr* srcs, std::size_t count, Visit&& visit) {
  if (dsts == nullptr || srcs == nullptr) return;
  for (std::size_t i = 0; i < count; ++i) visit(dsts[i], srcs[i]);
}

using MemOps = CUresult (*)(CUstream, unsigned, CUstreamBatchMemOpParams*, unsigned);

CUresult mem_ops(MemOps real, CUstream ordered_on, CUstream s, unsigned count, CUstreamBatchMemOpParams* ops,
                 unsigned flags) {
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return guarded_batch(
      ordered_on, [&](auto&& visit) { visit_mem_ops(count, ops, visit); }, [&] { return real(s, count, ops, flags); });
}

}  // namespace

TIDEPOOL_HOOK CUresult cuStreamBatchMemOp_v2(CUstream s, unsigned int count, CUstreamBatchMemOpParams* ops,
                                             unsigned int flags) {
  return mem_ops(TIDEPOOL_REAL_DRIVER(cuStreamBatchMemOp_v2), s, s, count, ops, flags);
}
TIDEPOOL_HOOK CUresult cuStreamBatchMemOp_v2_ptsz(CUstream s, unsigned int count, CUstreamBatchMemOpParams* ops,
                                                  unsigned int flags) {
  return mem_ops(TIDEPOOL_REAL_DRIVER(cuStreamBatchMemOp_v2_ptsz), per_thread_default(s), s, count, ops, flags);
}
// The pre-11.7 ABI, which cuda.h renames to the _v2 forms.
TIDEPOOL_HOOK CUresult tidepool_cuStreamBatchMemOp_v1(CUstream s, unsigned int count, CUstreamBatchMemOpParams* ops,
                                                      unsigned int flags) {
  static std::atomic<void*> slot{nullptr};
  return mem_ops(tidepool::interpose::real_driver<MemOps>("cuStreamBatchMemOp", slot), s, s, count, ops, flags);
}
TIDEPOOL_HOOK CUresult tidepool_cuStreamBatchMemOp_v1_ptsz(CUstream s, unsigned int count,
                                                           CUstreamBatchMemOpParams* ops, unsigned int flags) {
  static std::atomic<void*> slot{nullptr};
  return mem_ops(tidepool::interpose::real_driver<MemOps>("cuStreamBatchMemOp_ptsz", slot), per_thread_default(s), s,
                 count, ops, flags);
}

namespace {

using CopyBatchV1 = CUresult (*)(CUdeviceptr*, CUdeviceptr*, std::size_t*, std::size_t, CUmemcpyAttributes*,
                                 std::size_t*, std::size_t, std::size_t*, CUstream);

// Calls `real` with the hook's arguments (`fail_idx` for CUDA 12.8's form
// only), every copy's addresses guarded on `ordered_on`.
template <typename Real, typename... FailIndex>
CUresult copy_batch(Real real, CUstream ordered_on, CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes,
                    std::size_t count, CUmemcpyAttributes* attrs, std::size_t* attrs_idxs, std::size_t num_attrs,
                    CUstream s, FailIndex... fail_idx) {
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return guarded_batch(
      ordered_on, [&](auto&& visit) { visit_copies(dsts, srcs, count, visit); },
      [&] { return real(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, fail_idx..., s); });
}

}  // namespace

TIDEPOOL_HOOK CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes,
                                             std::size_t count, CUmemcpyAttributes* attrs, std::size_t* attrs_idxs,
                                             std::size_t num_attrs, CUstream s) {
  return copy_batch(TIDEPOOL_REAL_DRIVER(cuMemcpyBatchAsync_v2), s, dsts, srcs, sizes, count, attrs, attrs_idxs,
                    num_attrs, s);
}
TIDEPOOL_HOOK CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes,
                                                  std::size_t count, CUmemcpyAttributes* attrs, std::size_t* attrs_idxs,
                                                  std::size_t num_attrs, CUstream s) {
  return copy_batch(TIDEPOOL_REAL_DRIVER(cuMemcpyBatchAsync_v2_ptsz), per_thread_default(s), dsts, srcs, sizes, count,
                    attrs, attrs_idxs, num_attrs, s);
}

TIDEPOOL_HOOK CUresult tidepool_cuMemcpyBatchAsync_v1(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes,
                                                      std::size_t count, CUmemcpyAttributes* attrs,
                                                      std::size_t* attrs_idxs, std::size_t num_attrs,
                                                      std::size_t* fail_idx, CUstream s) {
  static std::atomic<void*> slot{nullptr};
  return copy_batch(tidepool::interpose::real_driver<CopyBatchV1>("cuMemcpyBatchAsync", slot), s, dsts, srcs, sizes,
                    count, attrs, attrs_idxs, num_attrs, s, fail_idx);
}
TIDEPOOL_HOOK CUresult tidepool_cuMemcpyBatchAsync_v1_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes,
                                                           std::size_t count, CUmemcpyAttributes* attrs,
                                                           std::size_t* attrs_idxs, std::size_t num_attrs,
                                                           std::size_t* fail_idx, CUstream s) {
  static std::atomic<void*> slot{nullptr};
  return copy_batch(tidepool::interpose::real_driver<CopyBatchV1>("cuMemcpyBatchAsync_ptsz", slot),
                    per_thread_default(s), dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, s, fail_idx);
}

namespace {

using Copy3DBatchV1 = CUresult (*)(std::size_t, CUDA_MEMCPY3D_BATCH_OP*, std::size_t*, unsigned long long, CUstream);

CUdeviceptr pointer_of(const CUmemcpy3DOperand& operand) {
  return operand.type == CU_MEMCPY_OPERAND_TYPE_POINTER ? operand.op.ptr.ptr : 0;
}

template <typename Visit>
void visit_3d_copies(const CUDA_MEMCPY3D_BATCH_OP* ops, std::size_t count, Visit&& visit) {
  if (ops == nullptr) return;
  for (std::size_t i = 0; i < count; ++i) visit(pointer_of(ops[i].dst), pointer_of(ops[i].src));
}

// Calls `real` with the hook's arguments (`fail_idx` for CUDA 12.8's form
// only), every pointer operand guarded on `ordered_on`.
template <typename Real, typename... FailIndex>
CUresult copy_3d_batch(Real real, CUstream ordered_on, std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops,
                       unsigned long long flags, CUstream s, FailIndex... fail_idx) {
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return guarded_batch(
      ordered_on, [&](auto&& visit) { visit_3d_copies(ops, count, visit); },
      [&] { return real(count, ops, fail_idx..., flags, s); });
}

}  // namespace

TIDEPOOL_HOOK CUresult cuMemcpy3DBatchAsync_v2(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, unsigned long long flags,
                                               CUstream s) {
  return copy_3d_batch(TIDEPOOL_REAL_DRIVER(cuMemcpy3DBatchAsync_v2), s, count, ops, flags, s);
}
TIDEPOOL_HOOK CUresult cuMemcpy3DBatchAsync_v2_ptsz(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops,
                                                    unsigned long long flags, CUstream s) {
  return copy_3d_batch(TIDEPOOL_REAL_DRIVER(cuMemcpy3DBatchAsync_v2_ptsz), per_thread_default(s), count, ops, flags, s);
}
TIDEPOOL_HOOK CUresult tidepool_cuMemcpy3DBatchAsync_v1(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops,
                                                        std::size_t* fail_idx, unsigned long long flags, CUstream s) {
  static std::atomic<void*> slot{nullptr};
  return copy_3d_batch(tidepool::interpose::real_driver<Copy3DBatchV1>("cuMemcpy3DBatchAsync", slot), s, count, ops,
                       flags, s, fail_idx);
}
TIDEPOOL_HOOK CUresult tidepool_cuMemcpy3DBatchAsync_v1_ptsz(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops,
                                                             std::size_t* fail_idx, unsigned long long flags,
                                                             CUstream s) {
  static std::atomic<void*> slot{nullptr};
  return copy_3d_batch(tidepool::interpose::real_driver<Copy3DBatchV1>("cuMemcpy3DBatchAsync_ptsz", slot),
                       per_thread_default(s), count, ops, flags, s, fail_idx);
}
