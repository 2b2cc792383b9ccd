/* The simulated driver's control API: what tests use to steer the sim beyond
 * the CUDA driver API. Exported from the sim's libcuda.so.1 only; reach it
 * with dlsym on the driver handle. See README.md for the environment
 * variables that do the same from outside a process. */
#ifndef TIDEPOOL_SIM_CONTROL_H
#define TIDEPOOL_SIM_CONTROL_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A "kernel": a host function run on the stream's worker thread with the
 * launch's parameter pointers (each points at a copy of the argument). */
typedef void (*tidepool_sim_kernel_fn)(void** params, void* user_data);

/* Makes the `nth` call from now (1 = the next) of the driver function `name`
 * (its exported name, e.g. "cuMemCreate") fail with `result`. */
void tidepool_sim_inject_fault(const char* name, unsigned nth, CUresult result);
/* Clears the injected faults and signals, and forgets remap, access,
 * unmapped and misaligned faults (tidepool_sim_remap_faults, ...): for a
 * test that provoked one on purpose. */
void tidepool_sim_clear_faults(void);
/* Makes the `nth` call from now of the driver function `name` raise `signal`
 * in the calling thread (raise(3)) as it enters, outside the sim's own locks,
 * as a signal can land while a caller is inside any driver call. Cleared by
 * tidepool_sim_clear_faults. */
void tidepool_sim_raise_in(const char* name, unsigned nth, int signal);

/* Device capacity in bytes (what cuMemGetInfo reports as total). */
void tidepool_sim_set_capacity(size_t bytes);
size_t tidepool_sim_capacity(void);
/* Device bytes held by cuMemAlloc allocations and device-located cuMemCreate handles.
 * Memory imported from another process (cuMemImportFromShareableHandle,
 * cuIpcOpenMemHandle) is the exporter's and not counted here. */
size_t tidepool_sim_device_bytes_in_use(void);
/* Host-located cuMemCreate bytes held (imports not counted either). */
size_t tidepool_sim_host_bytes_in_use(void);

/* Registers a kernel; `param_sizes[i]` is the byte size of parameter i. */
CUresult tidepool_sim_register_kernel(CUfunction* out, tidepool_sim_kernel_fn fn, void* user_data, size_t num_params,
                                      const size_t* param_sizes);
/* What each VMM call costs from now, as TIDEPOOL_SIM_VMM_US: host
 * microseconds per granularity page, "create:14.5,map:1.3,access:33,
 * unmap:22,release:16.4", and "host_create" for a host-located create, which
 * pins (create's when left out or 0); other names left out (or NULL) cost
 * nothing. */
void tidepool_sim_set_vmm_us(const char* spec);
/* Host nanoseconds named driver entry points take per call on the calling
 * thread, as TIDEPOOL_SIM_CALL_NS: "name:ns,...", e.g. "cuEventRecord:217,
 * cuEventQuery:1243,cuStreamWaitEvent:141,cuStreamIsCapturing:20,
 * cuCtxGetDevice:10" (an H200's, gpu/probe.cu); NULL or "": none. */
void tidepool_sim_set_call_ns(const char* spec);
/* Registers a context-less library kernel, the kind the CUDA runtime (12.0
 * on) gets from cuLibraryGetKernel for the kernels it launches: cuLaunchKernel
 * takes the handle cast to CUfunction; cuKernelGetParamInfo describes its
 * parameters and cuFuncGetParamInfo refuses it (CUDA_ERROR_INVALID_HANDLE). */
CUresult tidepool_sim_register_library_kernel(CUkernel* out, tidepool_sim_kernel_fn fn, void* user_data,
                                              size_t num_params, const size_t* param_sizes);
/* Declares what kernel `f` touches while it runs beyond the words of its
 * arguments: `count` (parameter `count_param`, a size_t) elements of
 * `element_bytes` from the pointer in parameter `pointer_param`. The fault
 * checks (tidepool_sim_remap_faults, tidepool_sim_unmapped_faults) then see
 * the whole range, not only the pointer's first byte. */
CUresult tidepool_sim_set_kernel_extent(CUfunction f, size_t pointer_param, size_t count_param, size_t element_bytes);

/* Non-zero: cuEventRecord returns only once the event has completed (after
 * all work queued before it). A real GPU gives no such promise; it is for
 * tools that launch no work, such as tidepool-replay, whose answers must not
 * depend on how fast the stream threads run. Default: off. */
void tidepool_sim_set_records_wait(int on);

/* The virtual clock, for tools that model a device lagging the host and
 * need the same answers on every run (tidepool-replay's --lag-us). On (the
 * default is off), a kernel that calls tidepool_sim_run_for holds its stream
 * until the clock reaches its end, which moves only by
 * tidepool_sim_advance_clock and by host waits (a synchronisation or a full
 * queue moves it to each next kernel end in turn until the wait is over).
 * cuEventQuery and cuStreamQuery first let every stream run until it waits
 * for the clock, for another stream, or for work. Turn it on while no work
 * is queued. Work blocked on anything else (a stream memory wait, whoever
 * writes the value; a host function that blocks) must not be queued with the
 * clock on: a host look gives up on it after 10 s without progress, saying
 * so once on stderr. Event timestamps and the copy bandwidth's delays stay in
 * wall time. */
void tidepool_sim_set_virtual_clock(int on);
/* Moves the virtual clock on by `ns`. */
void tidepool_sim_advance_clock(uint64_t ns);
/* The virtual clock's time in nanoseconds (0 when it never moved). */
uint64_t tidepool_sim_clock_ns(void);
/* In a kernel (on a stream's worker): holds the stream for `ns` of its
 * device time, on the virtual clock when it is on, else by spinning that
 * long. CUDA_ERROR_INVALID_CONTEXT outside a stream's work. */
CUresult tidepool_sim_run_for(uint64_t ns);

/* Counts of calls made to `name` since the process started. */
uint64_t tidepool_sim_call_count(const char* name);

/* Forces the capture status cuStreamIsCapturing and cuStreamGetCaptureInfo
 * report for `stream` (non-zero: active). Only the report changes: work on
 * the stream still runs. A real capture is cuStreamBeginCapture. */
void tidepool_sim_set_capturing(CUstream stream, int capturing);

/* Host<->device copy bandwidth in GB/s (1e9 bytes/s); 0 (or a negative or
 * non-finite value) is unlimited, the default unless TIDEPOOL_SIM_COPY_GBPS
 * says otherwise. A copy between host memory (pageable, pinned, or VA mapped
 * to host-located physical memory) and device memory enqueued after this call
 * takes at least bytes / bandwidth of its stream's time, its bytes landing a
 * slice at a time over it. Each stream copies at
 * the full bandwidth: concurrent copies do not share the link. Copies within
 * the device or within the host are never slowed. */
void tidepool_sim_set_copy_gbps(double gbps);
/* About how many items each stream holds queued, not yet started, before the
 * host thread that submits one more (a launch, copy, set, record, wait)
 * blocks until one starts, as a GPU's full work queue blocks a launch (about
 * 1024 launches on NVIDIA GPUs). 1024 unless TIDEPOOL_SIM_QUEUE_DEPTH sets
 * another; 0: unbounded. */
void tidepool_sim_set_queue_depth(size_t depth);
size_t tidepool_sim_queue_depth(void);
/* Bytes copied so far from host to device memory (to_device non-zero) or
 * from device to host memory, counted as the copies run. */
uint64_t tidepool_sim_copied_bytes(int to_device);

/* Kernel executions so far whose arguments held, in some 8-byte-aligned word
 * of some parameter, an address inside VA mapped to host-located physical
 * memory (what a GPU would read over the bus). Counted as the kernels run. */
uint64_t tidepool_sim_host_resident_launches(void);

/* Copy and set nodes of launched graphs (captured cuMemcpy*Async and
 * cuMemsetD8Async) whose source or destination lay, when they ran, inside VA
 * mapped to host-located physical memory. Counted as the nodes run. */
uint64_t tidepool_sim_host_resident_graph_copies(void);

/* Copies and sets queued on `stream` (not captured) whose source or
 * destination range held, when they ran, any byte of VA mapped to
 * host-located physical memory: what a GPU would carry over the bus. A source read when the call
 * was made (pageable memory, a batch's DURING_API_CALL) is judged then.
 * 0 for a handle that names no live stream. */
uint64_t tidepool_sim_host_resident_copies(CUstream stream);

/* Running work hit by a cuMemUnmap of a range it touched, one count per
 * work and call: a kernel that named an address there (in an 8-byte word
 * of its arguments, or its declared extent), tidepool's kernels' regions, a
 * copy's source or destination, a set's or stream memory operation's
 * target; and work a cuMemSetAccess took the access it needs from (all
 * access, or write access from a write; a kernel's extent counts as a
 * read), the mapping's protection changing once the work is done. A page
 * mapped where such work still runs stays writable for it until it is
 * done, then holds to its access list. On a
 * GPU that work would fault; the sim prints one line to stderr at the
 * first, ends a stream wait or a rate-limited copy there, and from then on
 * cuCtxSynchronize, cuStreamSynchronize and cuEventSynchronize answer
 * CUDA_ERROR_ILLEGAL_ADDRESS, as the context's sticky error. */
uint64_t tidepool_sim_remap_faults(void);

/* Kernels that named memory their device may not reach: another device's
 * cuMemAlloc memory without peer access (cuCtxEnablePeerAccess), or a VMM
 * mapping whose access list (cuMemSetAccess) does not name the device. Such
 * a kernel faults on a GPU: the sim skips it, prints one line to stderr at
 * the first, and answers synchronisations as after a remap fault. Checked
 * only with more than one device (TIDEPOOL_SIM_DEVICES). */
uint64_t tidepool_sim_access_faults(void);

/* Kernels, copies, sets and stream memory operations that reached, as they
 * started, reserved VA (cuMemAddressReserve) with nothing mapped there, or
 * a mapping without the access they need (cuMemSetAccess; a write needs
 * read-write): work queued before an unmap that ran after it, say. A
 * kernel's reach is the range its extent declares
 * (tidepool_sim_set_kernel_extent), taken as read, never a pointer among
 * its arguments alone, which it may not follow. On a GPU each one faults:
 * the sim skips it, prints one line to stderr at the first, and answers
 * synchronisations as after a remap fault. A range unmapped while running
 * work touches it (tidepool_sim_remap_faults) is scratch memory until that
 * work is done, so the work's stray bytes never land in the process's other
 * memory (a page mapped there meanwhile may take them, as on a GPU); a
 * reservation freed meanwhile leaves the process when the work is done.
 * A source of device-reachable memory the driver reads during the call (a
 * batch copy's DURING_API_CALL; one into pageable memory waits for the copy
 * instead) is checked then: the call answers CUDA_ERROR_ILLEGAL_ADDRESS (the
 * sim's choice: the driver documents none) and that copy is not queued; a
 * batch's earlier copies are. Not caught: memory outside reserved VA
 * (cuMemAlloc memory after its cuMemFree has left the process), and
 * pageable host memory, the program's own. */
uint64_t tidepool_sim_unmapped_faults(void);

/* Kernels of tidepool's (the compression kernels the sim runs by
 * reference) launched with an access off its alignment: an unaligned page,
 * table or stream, or a chunk offset off a 4-byte word. On a GPU such a
 * kernel faults with CUDA_ERROR_MISALIGNED_ADDRESS, sticky: the sim skips
 * it, prints one line to stderr at the first, and answers synchronisations
 * with that error (or CUDA_ERROR_ILLEGAL_ADDRESS after another fault). A
 * pack whose offsets leave its stream's payloads counts among
 * tidepool_sim_access_faults, and writes nothing: a GPU writes those bytes
 * where the sim cannot tell. So does a pack that finds a chunk longer than
 * its room (offsets planned from other counts), found as it runs: it stops
 * there, having written only inside its stream. */
uint64_t tidepool_sim_misaligned_faults(void);

#ifdef __cplusplus
}
#endif

#endif /* TIDEPOOL_SIM_CONTROL_H */
