// The one table of TIDEPOOL_CONF keys. Each row is
//   X(key, kind, default, description)
// and everything else (the Config fields' defaults, the parser, `--help` of
// tidepool-run and docs/configuration.md) is generated from these rows.
// Adding an option is one row here plus the field it fills in config.hpp
// (and, for an allocator option, its line in allocator_options()). The
// option structs of the layers below (pool::PoolOptions,
// residency::ResidencyOptions) cannot include this table; a test
// (Config.TheOptionStructsBelowTheRuntimeDefaultAsTheTableDoes) holds their
// defaults to it.
//
// Kinds: size (bytes with units), size_or_percent (bytes or % of the
// device; at least 2MiB, at most the device), cache_size (0 or at least
// 2MiB), switch (on/off), policy (a registered placement policy), path,
// log_level (off, error, warn, info, debug, trace), evict_policy (lru,
// largest), prefetch_mode (off, hints, launch, learn), compress_mode (off,
// zero, auto).
#pragma once

// clang-format off
#define TIDEPOOL_OPTIONS(X)                                                                                 \
  X(device_limit,     size_or_percent, "",         "Device memory budget: bytes with a unit or a % of the device, from 2MiB to what the device has. Memory the program makes with cuMemCreate outside the pool, and allocations from memory pools of its own, count against it too. Default: what the device reports.") \
  X(policy,           policy,          "best_fit", "Placement policy: best_fit, first_fit, next_fit, worst_fit, binned, two_ended.") \
  X(evict,            switch,          "off",      "Under device_limit, move pages of idle live blocks to a pinned host cache instead of failing; they come back on hints and when handed out again. The device pointers never change. Needs host-located VMM (CUDA 12.2+); without it eviction stays off and the log says why.") \
  X(host_cache,       cache_size,      "",         "Bound on pinned host memory for evicted pages, at least 2MiB. Default: half the host's physical memory. An allocation that would evict past it fails with out-of-memory.") \
  X(evict_policy,     evict_policy,    "lru",      "Which live blocks are evicted first: lru (least recently used: allocation, hints, prefetches) or largest (most device pages first).") \
  X(prefetch,         prefetch_mode,   "hints",    "When evicted pages come back: off (only when handed out again or advised; tidepool_prefetch is ignored), hints (also on tidepool_prefetch / tidepool_advise), launch (also before each kernel launch that passes a pointer into them: the preload scans launch arguments), learn (launch, plus a learned schedule: the step's launch order is found and blocks come back a few launches before their use, idle ones are copied out ahead and evicted needed-last first, moved without a device gate, a launch may wait, as cudaFree would, for the work queued before the frees whose pages it takes; it trusts kernels to reach pool memory through their parameters).") \
  X(compress,         compress_mode,   "off",      "Evicted pages travel and rest on the host compressed, so fewer bytes cross the bus and stay pinned: off, zero (zero-value compression at 4-byte or 2-byte granularity, whichever is smaller, for each page whose sample says it saves an eighth; the rest go raw), auto (zero, sampling less while pages keep coming out incompressible). Lossless. Needs evict:on, prefetch:launch or learn and the preload, since a compressed page is unpacked before every access tidepool sees; a launch whose parameters cannot be read turns it off for the run. Needs a build with nvcc.") \
  X(free_barrier,     switch,          "on",       "cudaFree-style frees (cudaFree, cuMemFree, tidepool_free) go back behind a device barrier: the block may be handed out at once, every stream's later work runs after the work queued before the free, and the host never waits. off: the block is not handed out until the work queued before its free has finished; set it for memory written outside streams (host code through mapped memory, cuFile, RDMA from a NIC), which the barrier does not order. Once several contexts can reach the pool (a second device, peer access, a second context), frees are fenced as under off, and each also waits for the other contexts' work, as native cudaFree does.") \
  X(small_size,       size,            "128KiB",   "Requests up to this size are small: packed on pages of their own.") \
  X(hold_slack,       percent,         "3%",       "How far above its peak live bytes the pool may grow so that a training loop stops remapping pages every step. Higher: fewer VMM calls, more memory held.") \
  X(report,           path,            "",         "Write the JSON report to this path at exit; %p in it is the process id (one file per process of a job).") \
  X(trace,            path,            "",         "Record every allocation event to this path as RMM logging CSV, with an Owner column naming the library that asked; a path ending in .gz is written gzipped (zlib is loaded only then); %p in it is the process id.") \
  X(log,              log_level,       "warn",     "Log level: off, error, warn, info, debug, trace.") \
  X(log_file,         path,            "",         "Write the log to this file instead of stderr; %p in it is the process id.") \
  X(cuda_lib,         path,            "",         "The CUDA driver library to open. Default: $TIDEPOOL_CUDA_LIB, else libcuda.so.1.")
// clang-format on
