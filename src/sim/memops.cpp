// Stream memory operations: cuStreamWaitValue32/64, cuStreamWriteValue32/64
// and cuStreamBatchMemOp (the _v2 ABI, which cuGetProcAddress hands out from
// CUDA 11.7, the v1 ABI before it, which behaves the same here, and their
// per-thread-default-stream forms).
//
// The address is a device pointer the device can reach: device memory,
// pinned host memory (its device pointer is its host address, see
// cuMemHostGetDevicePointer_v2) or a VMM mapping. A wait occupies its
// stream's worker until the condition holds for a value stored by anyone
// (the host, another stream), so later work on that stream waits, as on the
// GPU. Nothing else waits for it: a stream destroyed while it waits stays
// blocked, and its worker is abandoned at exit (the sim's state is leaked on
// purpose, so no destructor joins it).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>

#include "sim/sim.hpp"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

using namespace tidepool::sim;  // NOLINT(google-build-using-namespace): exported C entry points below

namespace {

// The device's own load and store of the word, which are no accesses of the
// host program: a program signals the device with a plain (volatile) store
// and reads what the device wrote the same way, which is correct on a GPU
// but, with a stream worker standing in for the device, would be a C++ data
// race on the word. So TSan does not see these two accesses; what the device
// guarantees between its streams (a write is fenced after the writer's
// earlier work, a satisfied wait orders the waiter's later work after it) is
// told to TSan instead, so work ordered through a word is not reported.
template <typename T>
__attribute__((noinline, no_sanitize("thread"))) T device_load(const T* address) {
  return __atomic_load_n(address, __ATOMIC_ACQUIRE);
}

template <typename T>
__attribute__((noinline, no_sanitize("thread"))) void device_store(T* address, T value) {
  __atomic_store_n(address, value, __ATOMIC_SEQ_CST);
}

void ordered_before_word(const void* address) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(const_cast<void*>(address));
#else
  (void)address;
#endif
}

void ordered_after_word(const void* address) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(const_cast<void*>(address));
#else
  (void)address;
#endif
}

template <typename T>
bool satisfied(T current, T value, unsigned condition) {
  switch (condition) {
    // A cyclic comparison, as the driver documents: wraparound is ignored.
    case CU_STREAM_WAIT_VALUE_GEQ: return static_cast<std::make_signed_t<T>>(static_cast<T>(current - value)) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return current == value;
    case CU_STREAM_WAIT_VALUE_AND: return (current & value) != 0;
    default: return static_cast<T>(~(current | value)) != 0;  // CU_STREAM_WAIT_VALUE_NOR
  }
}

// Spins first, so a value stored soon after is seen at once, then backs off
// to sleeps of at most 50 us, so a wait that lasts costs the machine (two
// cores, shared with the program under test) little. The sim's lock is never
// held here.
// `faulted`: the word was unmapped under the wait (Running::hit), which a
// GPU faults on: the wait ends there.
template <typename T>
void wait_until(const T* address, T value, unsigned condition, const std::atomic<bool>& faulted) {
  constexpr unsigned kSpins = 2000;
  constexpr unsigned kYields = 200;
  constexpr auto kLongestSleep = std::chrono::microseconds(50);
  auto sleep = std::chrono::microseconds(1);
  for (unsigned round = 0;; ++round) {
    if (faulted.load(std::memory_order_relaxed)) return;
    // Acquire: what was written before the value is visible to later work.
    if (satisfied(device_load(address), value, condition)) {
      ordered_after_word(address);
      return;
    }
    if (round < kSpins) continue;
    if (round < kSpins + kYields) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, kLongestSleep);
  }
}

// A naturally aligned word in memory the device can reach.
CUresult check_address(CUdeviceptr address, std::size_t bytes) {
  if (address == 0 || address % bytes != 0) return CUDA_ERROR_INVALID_VALUE;
  return device_reachable(static_cast<std::uintptr_t>(address), bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

template <typename T>
CUresult wait_value(const char* name, CUstream handle, CUdeviceptr address, T value, unsigned flags) {
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  // FLUSH orders remote writes seen before the wait; the acquiring load
  // already gives that here.
  const unsigned condition = flags & ~static_cast<unsigned>(CU_STREAM_WAIT_VALUE_FLUSH);
  if (condition > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_address(address, sizeof(T)); r != CUDA_SUCCESS) return r;
  const auto* target = reinterpret_cast<const T*>(address);
  return submit(stream,
                [target, value, condition] {
                  const auto at = reinterpret_cast<std::uintptr_t>(target);
                  const Running running({{at, at + sizeof(T)}}, "stream wait");
                  if (running.reachable()) wait_until(target, value, condition, running.hit());
                })
      .result;
}

template <typename T>
CUresult write_value(const char* name, CUstream handle, CUdeviceptr address, T value, unsigned flags) {
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  // CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER belongs to the v1 ABI only.
  if (flags != CU_STREAM_WRITE_VALUE_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_address(address, sizeof(T)); r != CUDA_SUCCESS) return r;
  auto* target = reinterpret_cast<T*>(address);
  // The default write is fenced after the stream's earlier work: whoever
  // sees the value sees what that work wrote.
  return submit(stream,
                [target, value] {
                  const auto at = reinterpret_cast<std::uintptr_t>(target);
                  const Running running({{at, at + sizeof(T), true}}, "stream write");
                  if (!running.reachable()) return;
                  ordered_before_word(target);
                  device_store(target, value);
                })
      .result;
}

CUstream per_thread(CUstream handle) { return handle == nullptr ? CU_STREAM_PER_THREAD : handle; }

// An operation's tag as the caller wrote it: a value no enumerator names is
// an error to report, not one to load as the enum (undefined behaviour).
unsigned operation_of(const CUstreamBatchMemOpParams& op) {
  unsigned tag = 0;
  std::memcpy(&tag, &op, sizeof tag);
  return tag;
}

// One operation of a batch, checked before anything is queued.
CUresult check_batch_op(const CUstreamBatchMemOpParams& op) {
  switch (operation_of(op)) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
      const bool wide = operation_of(op) == CU_STREAM_MEM_OP_WAIT_VALUE_64;
      const unsigned condition = op.waitValue.flags & ~static_cast<unsigned>(CU_STREAM_WAIT_VALUE_FLUSH);
      if (condition > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
      return check_address(op.waitValue.address, wide ? sizeof(cuuint64_t) : sizeof(cuuint32_t));
    }
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
      const bool wide = operation_of(op) == CU_STREAM_MEM_OP_WRITE_VALUE_64;
      if (op.writeValue.flags != CU_STREAM_WRITE_VALUE_DEFAULT) return CUDA_ERROR_INVALID_VALUE;  // as write_value
      return check_address(op.writeValue.address, wide ? sizeof(cuuint64_t) : sizeof(cuuint32_t));
    }
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      return op.flushRemoteWrites.flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_STREAM_MEM_OP_BARRIER: return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// Runs one checked operation on the stream's worker. A flush and a barrier
// order nothing beyond what the worker's program order already does.
void run_batch_op(const CUstreamBatchMemOpParams& op) {
  const unsigned kind = operation_of(op);
  const bool wait = kind == CU_STREAM_MEM_OP_WAIT_VALUE_32 || kind == CU_STREAM_MEM_OP_WAIT_VALUE_64;
  const bool write = kind == CU_STREAM_MEM_OP_WRITE_VALUE_32 || kind == CU_STREAM_MEM_OP_WRITE_VALUE_64;
  if (!wait && !write) return;
  const bool wide = kind == CU_STREAM_MEM_OP_WAIT_VALUE_64 || kind == CU_STREAM_MEM_OP_WRITE_VALUE_64;
  const auto at = static_cast<std::uintptr_t>(wait ? op.waitValue.address : op.writeValue.address);
  const Running running({{at, at + (wide ? sizeof(cuuint64_t) : sizeof(cuuint32_t)), write}},
                        wait ? "stream wait" : "stream write");
  if (!running.reachable()) return;
  switch (kind) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      wait_until(reinterpret_cast<const cuuint32_t*>(op.waitValue.address), op.waitValue.value,
                 op.waitValue.flags & ~static_cast<unsigned>(CU_STREAM_WAIT_VALUE_FLUSH), running.hit());
      return;
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      wait_until(reinterpret_cast<const cuuint64_t*>(op.waitValue.address), op.waitValue.value64,
                 op.waitValue.flags & ~static_cast<unsigned>(CU_STREAM_WAIT_VALUE_FLUSH), running.hit());
      return;
    case CU_STREAM_MEM_OP_WRITE_VALUE_32: {
      auto* target = reinterpret_cast<cuuint32_t*>(op.writeValue.address);
      ordered_before_word(target);
      device_store(target, op.writeValue.value);
      return;
    }
    case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
      auto* target = reinterpret_cast<cuuint64_t*>(op.writeValue.address);
      ordered_before_word(target);
      device_store(target, op.writeValue.value64);
      return;
    }
    default: return;
  }
}

// The operations run in the order given, as one piece of work: a wait holds
// up the operations after it. The driver takes fewer than 256 at a time.
CUresult batch_mem_op(const char* name, CUstream handle, unsigned count, const CUstreamBatchMemOpParams* ops,
                      unsigned flags) {
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  constexpr unsigned kMostOps = 255;
  if (flags != 0 || count == 0 || count > kMostOps || ops == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    if (CUresult r = check_batch_op(ops[i]); r != CUDA_SUCCESS) return r;
  }
  // The caller may reuse its array once the call returns.
  return submit(stream,
                [copied = std::vector<CUstreamBatchMemOpParams>(ops, ops + count)] {
                  for (const CUstreamBatchMemOpParams& op : copied) run_batch_op(op);
                })
      .result;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                                    unsigned int flags) {
  return wait_value("cuStreamWaitValue32_v2", stream, addr, value, flags);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamWaitValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                                         unsigned int flags) {
  return wait_value("cuStreamWaitValue32_v2_ptsz", per_thread(stream), addr, value, flags);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                                    unsigned int flags) {
  return wait_value("cuStreamWaitValue64_v2", stream, addr, value, flags);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamWaitValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                                         unsigned int flags) {
  return wait_value("cuStreamWaitValue64_v2_ptsz", per_thread(stream), addr, value, flags);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                                     unsigned int flags) {
  return write_value("cuStreamWriteValue32_v2", stream, addr, value, flags);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                                          unsigned int flags) {
  return write_value("cuStreamWriteValue32_v2_ptsz", per_thread(stream), addr, value, flags);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                                     unsigned int flags) {
  return write_value("cuStreamWriteValue64_v2", stream, addr, value, flags);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamWriteValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                                          unsigned int flags) {
  return write_value("cuStreamWriteValue64_v2_ptsz", per_thread(stream), addr, value, flags);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* ops,
                                                   unsigned int flags) {
  return batch_mem_op("cuStreamBatchMemOp_v2", stream, count, ops, flags);
}

TIDEPOOL_SIM_EXPORT CUresult cuStreamBatchMemOp_v2_ptsz(CUstream stream, unsigned int count,
                                                        CUstreamBatchMemOpParams* ops, unsigned int flags) {
  return batch_mem_op("cuStreamBatchMemOp_v2_ptsz", per_thread(stream), count, ops, flags);
}

// The pre-11.7 ABI (cuda.h renames it to the _v2 forms): the same operations,
// each under its own name and in its per-thread form.
#define TIDEPOOL_SIM_MEM_OP_V1(op, word, run)                                                                     \
  TIDEPOOL_SIM_EXPORT CUresult tidepool_sim_cuStream##op##_v1(CUstream stream, CUdeviceptr addr, word value,      \
                                                              unsigned int flags) {                               \
    return run("cuStream" #op, stream, addr, value, flags);                                                       \
  }                                                                                                               \
  TIDEPOOL_SIM_EXPORT CUresult tidepool_sim_cuStream##op##_v1_ptsz(CUstream stream, CUdeviceptr addr, word value, \
                                                                   unsigned int flags) {                          \
    return run("cuStream" #op "_ptsz", per_thread(stream), addr, value, flags);                                   \
  }
TIDEPOOL_SIM_MEM_OP_V1(WriteValue32, cuuint32_t, write_value)
TIDEPOOL_SIM_MEM_OP_V1(WriteValue64, cuuint64_t, write_value)
TIDEPOOL_SIM_MEM_OP_V1(WaitValue32, cuuint32_t, wait_value)
TIDEPOOL_SIM_MEM_OP_V1(WaitValue64, cuuint64_t, wait_value)
#undef TIDEPOOL_SIM_MEM_OP_V1

TIDEPOOL_SIM_EXPORT CUresult tidepool_sim_cuStreamBatchMemOp_v1(CUstream stream, unsigned int count,
                                                                CUstreamBatchMemOpParams* ops, unsigned int flags) {
  return batch_mem_op("cuStreamBatchMemOp", stream, count, ops, flags);
}

TIDEPOOL_SIM_EXPORT CUresult tidepool_sim_cuStreamBatchMemOp_v1_ptsz(CUstream stream, unsigned int count,
                                                                     CUstreamBatchMemOpParams* ops,
                                                                     unsigned int flags) {
  return batch_mem_op("cuStreamBatchMemOp_ptsz", per_thread(stream), count, ops, flags);
}
