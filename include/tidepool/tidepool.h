/* tidepool: the public C API.
 *
 * Link against libtidepool.so (or preload it) and call these to allocate
 * device memory from tidepool's pool directly, read its statistics, set the
 * device budget and trim the cache. Every function is safe to call from any
 * thread, never throws, never prints to stdout, and reports failure through
 * its return value. Streams are CUstream / cudaStream_t values passed as
 * void*; 0 is the legacy default stream.
 */
#ifndef TIDEPOOL_TIDEPOOL_H
#define TIDEPOOL_TIDEPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TIDEPOOL_API __attribute__((visibility("default")))
#else
#define TIDEPOOL_API
#endif

typedef enum tidepool_status {
  TIDEPOOL_OK = 0,
  TIDEPOOL_ERROR_OUT_OF_MEMORY = 1,
  TIDEPOOL_ERROR_INVALID_VALUE = 2,
  TIDEPOOL_ERROR_NOT_SUPPORTED = 3,
  TIDEPOOL_ERROR_NOT_INITIALIZED = 4,
  TIDEPOOL_ERROR_DRIVER = 5,
  TIDEPOOL_ERROR_BAD_CONFIG = 6,
  TIDEPOOL_ERROR_IO = 7
} tidepool_status;

/* Per-device statistics. Byte counts are of requested sizes unless named
 * otherwise; reserved bytes are physical device memory held by the pool. */
typedef struct tidepool_stats {
  uint64_t allocations;
  uint64_t frees;
  uint64_t live_bytes;
  uint64_t peak_live_bytes;
  uint64_t reserved_bytes;
  uint64_t peak_reserved_bytes;
  uint64_t internal_waste_bytes; /* bytes handed out minus bytes requested, now */
  uint64_t ooms;
  uint64_t maps;
  uint64_t unmaps;
  uint64_t trims;
  uint64_t passthrough_allocations;
  double utilization;            /* peak_live_bytes / peak_reserved_bytes */
  double external_fragmentation; /* 1 - largest free block / free bytes, now */
} tidepool_stats;

/* "0.1.0" */
TIDEPOOL_API const char* tidepool_version(void);
/* A static, human-readable name for a status. */
TIDEPOOL_API const char* tidepool_status_string(tidepool_status status);

/* Allocates `size` bytes on `device` with cudaMalloc semantics: usable by any
 * stream. A zero size yields a null pointer and TIDEPOOL_OK. */
TIDEPOOL_API tidepool_status tidepool_malloc(void** ptr, size_t size, int device);
/* Frees with cudaFree's ordering for device work: no work queued after the
 * call, on any stream of the device, runs before the work queued before it
 * has finished. How that holds depends on free_barrier (docs/configuration.md):
 * - free_barrier:on, the default whenever tidepool sees every stream the
 *   process creates (preloaded, or linked and the program's streams made
 *   through the driver or runtime): the memory may be handed out again at
 *   once, and every stream's later work is ordered behind a device barrier,
 *   after the work queued before the free. The host never waits.
 * - free_barrier:off (and whenever tidepool cannot see every stream): the
 *   memory is not handed out again until the work queued before the call
 *   has finished.
 * Writers outside streams are ordered by neither the barrier nor stream
 * work: host code through mapped memory, cuFile, a NIC's RDMA, another
 * device over peer access. Under free_barrier:on their writes may land in
 * memory already handed out again; for memory they touch, set
 * free_barrier:off and make sure they have finished before the free.
 * Freeing NULL is a no-op. */
TIDEPOOL_API tidepool_status tidepool_free(void* ptr);

/* Stream-ordered variants: reuse on `stream` is immediate, on other streams it
 * waits for the work queued on `stream` before the free. */
TIDEPOOL_API tidepool_status tidepool_malloc_async(void** ptr, size_t size, int device, void* stream);
TIDEPOOL_API tidepool_status tidepool_free_async(void* ptr, void* stream);

TIDEPOOL_API tidepool_status tidepool_get_stats(int device, tidepool_stats* stats);
/* Device memory the process holds on `device` outside the pool, made with
 * the driver's VMM calls (cuMemCreate: NCCL's buffers, for one; seen under
 * the preload): bytes held now, and the most held at once. It counts against
 * device_limit. Either pointer may be NULL. Kept out of tidepool_stats so
 * that its size never changes under a caller built against an older header. */
TIDEPOOL_API tidepool_status tidepool_get_foreign_bytes(int device, uint64_t* bytes, uint64_t* peak_bytes);

/* Writes the JSON report to `path`, or to the configured `report` path when
 * `path` is NULL. */
TIDEPOOL_API tidepool_status tidepool_report(const char* path);

/* PyTorch's pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator):
 * stream-ordered allocate and free with the signatures PyTorch calls.
 * `stream` is a cudaStream_t. A failed allocation returns NULL, which PyTorch
 * reports as out of memory; the free of an unknown pointer is ignored and
 * logged, since PyTorch has no way to hear of it. */
TIDEPOOL_API void* tidepool_torch_malloc(ptrdiff_t size, int device, void* stream);
TIDEPOOL_API void tidepool_torch_free(void* ptr, ptrdiff_t size, int device, void* stream);

/* Sets the device budget in bytes (0 restores the default: what the device
 * reports). The rule of TIDEPOOL_CONF's device_limit holds: a budget below
 * 2 MiB or above the device's memory is TIDEPOOL_ERROR_INVALID_VALUE.
 * A budget below what the pool holds takes effect at once or not at all: the
 * pool first gives back what it can (spare and free pages, waiting for the
 * work before cudaFree-style frees; with evict:on, pages of live blocks move
 * to the host). If live memory that cannot leave the device still exceeds
 * it, the call returns TIDEPOOL_ERROR_OUT_OF_MEMORY and the old budget stays.
 * So the pool never holds more than the budget in force, which is what
 * cuMemGetInfo and the report show. */
TIDEPOOL_API tidepool_status tidepool_set_device_limit(int device, size_t bytes);

/* Releases cached physical memory the pool holds but does not use.
 * `released` (may be NULL) receives the bytes given back to the driver. */
TIDEPOOL_API tidepool_status tidepool_trim(int device, size_t* released);

/* Residency hints (TIDEPOOL_CONF evict:on; without eviction they check the
 * pointer and do nothing else). Pages of a block that were evicted to the
 * host cache come back to the device. */
typedef enum tidepool_advice {
  TIDEPOOL_ADVICE_WILL_NEED = 1,    /* used soon: bring back now, evict last */
  TIDEPOOL_ADVICE_WONT_NEED = 2,    /* idle for a while: evict first */
  TIDEPOOL_ADVICE_KEEP_RESIDENT = 3 /* bring back and never evict until freed */
} tidepool_advice;

/* Brings the evicted pages of the allocation(s) in [ptr, ptr + bytes) back
 * to the device. The copies are ordered before any work queued afterwards,
 * on `stream` and on every other stream; the caller does not wait for them.
 * TIDEPOOL_ERROR_INVALID_VALUE when `ptr` is not inside a live allocation;
 * TIDEPOOL_ERROR_OUT_OF_MEMORY when the budget had no room for some pages
 * (they stay on the host, where kernels still reach them). */
TIDEPOOL_API tidepool_status tidepool_prefetch(const void* ptr, size_t bytes, void* stream);
/* Applies `advice` to every live allocation overlapping [ptr, ptr + bytes). */
TIDEPOOL_API tidepool_status tidepool_advise(const void* ptr, size_t bytes, tidepool_advice advice);

#ifdef __cplusplus
}
#endif

#endif /* TIDEPOOL_TIDEPOOL_H */
