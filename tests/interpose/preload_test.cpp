// Specification of the preload: real programs, unmodified, run with
// libtidepool.so preloaded and the sim as their driver. Each route into the
// allocator (shared cudart, driver exports, dlopen + dlsym, cuGetProcAddress
// v1 and v2) must land in the pool, frees must return to it, foreign
// pointers must pass through, and the program's output and exit status must
// be what they are without tidepool.
#include "support/preload.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

namespace {

using tidepool::testing::run_command;
using tidepool::testing::sanitizer_preload_prefix;

struct ProgramRun {
  int status = -1;
  std::string out;
  std::string err;
  nlohmann::json report;  // devices[0] of the exit report, when one was written
  nlohmann::json whole;   // the whole exit report
};

// One run of the chaos probe (Preload::run_chaos): its prefetch mode, seed,
// extra environment and budget.
struct ChaosCase {
  const char* mode;
  const char* seed;
  const char* env;
  const char* budget = "40MiB";  // per device: two devices split the threads, and get less
};

class Preload : public ::testing::Test {
 protected:
  void SetUp() override {
    // A parameterised test's name holds a '/': one directory, not two.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = std::filesystem::temp_directory_path() / ("tidepool-preload-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `program mode` with the sim as libcuda.so.1; preloaded when `conf`
  // is given (the report path is added to it).
  ProgramRun run(const std::string& program, const std::string& mode, const char* conf) {
    const std::string report = (dir_ / report_name_).string();
    const std::string err = (dir_ / "stderr.txt").string();
    std::filesystem::remove(report);
    std::string command = time_limit_s_ > 0 ? "timeout -s KILL " + std::to_string(time_limit_s_) + " " : "";
    command += "env LD_LIBRARY_PATH=" SIM_DIR " TIDEPOOL_SIM_MEMORY=4GiB " + extra_env_;
    if (conf != nullptr) {
      std::string full = conf;
      full += std::string(full.empty() ? "" : ",") + "report:" + report;
      command += "TIDEPOOL_CONF='" + full + "' LD_PRELOAD=" + sanitizer_preload_prefix() + TIDEPOOL_LIBRARY + " ";
    } else if (!sanitizer_preload_prefix().empty()) {
      command += "LD_PRELOAD=" + sanitizer_preload_prefix() + " ";
    }
    command += program + " " + mode + " " + report + " 2>" + err;
    ProgramRun r;
    r.status = run_command(command, &r.out);
    std::ifstream err_in(err);
    r.err.assign(std::istreambuf_iterator<char>(err_in), std::istreambuf_iterator<char>());
    std::ifstream report_in(report);
    if (report_in) {
      const auto whole = nlohmann::json::parse(report_in, nullptr, false);
      if (!whole.is_discarded() && whole.contains("devices") && !whole["devices"].empty()) {
        r.report = whole["devices"][0];
        r.whole = whole;
      }
    }
    return r;
  }

  // The report's launches.<key>, or -1 without one.
  static long launches(const ProgramRun& r, const char* key) {
    if (!r.whole.is_object() || !r.whole.contains("launches")) return -1;
    return r.whole.at("launches").value(key, -1L);
  }

  // The value of `key=N` in a probe's "counts:" line on stderr.
  static long count(const ProgramRun& r, const std::string& key) {
    const auto at = r.err.find(key + "=");
    return at == std::string::npos ? -1 : std::stol(r.err.substr(at + key.size() + 1));
  }

  // Runs probe_races `mode` preloaded under a 16 MiB budget with eviction,
  // once in each prefetch mode, expecting it to pass, and `check` on each run.
  template <typename Check>
  void races_in_every_prefetch_mode(const char* mode, const Check& check) {
    for (const char* prefetch : {"prefetch:off", "prefetch:launch", "prefetch:learn"}) {
      SCOPED_TRACE(prefetch);
      const ProgramRun r = run(PROBE_RACES, mode, (std::string("device_limit:16MiB,evict:on,") + prefetch).c_str());
      EXPECT_EQ(r.status, 42) << r.err;
      check(r);
    }
  }

  // Runs with and without the preload and checks what must not change.
  ProgramRun both(const std::string& program, const std::string& mode, ProgramRun* without = nullptr,
                  const char* conf = "") {
    ProgramRun plain = run(program, mode, nullptr);
    ProgramRun hooked = run(program, mode, conf);
    EXPECT_EQ(plain.status, 42) << plain.err;
    EXPECT_EQ(hooked.status, plain.status) << hooked.err;
    EXPECT_EQ(hooked.out, plain.out) << "tidepool must never write to the program's stdout";
    if (without != nullptr) *without = plain;
    return hooked;
  }

  // `mode`'s cudaFree-style frees all came back, in the legacy stream's
  // order (no barrier queued) or behind queued barriers, and the old
  // writes landed before the new owners' (the program checks its bytes).
  void expect_frees_came_back(const char* mode, const char* conf, int allocations, bool in_legacy_order) {
    const ProgramRun r = both(PROBE_LINKED, mode, nullptr, conf);
    expect_all_returned(r, allocations);
    EXPECT_GE(r.report.value(in_legacy_order ? "legacy_order_barriers" : "device_barriers", -1), 1);
    EXPECT_EQ(r.report.value(in_legacy_order ? "device_barriers" : "legacy_order_barriers", -1), 0);
  }

  static void expect_all_returned(const ProgramRun& r, int allocations) {
    ASSERT_TRUE(r.report.is_object()) << "no report written; stderr:\n" << r.err;
    EXPECT_EQ(r.report.value("allocations", -1), allocations);
    EXPECT_EQ(r.report.value("frees", -1), allocations);
    EXPECT_EQ(r.report.value("live_bytes", -1), 0);
    EXPECT_EQ(r.report.value("passthrough_allocations", -1), 0);
    EXPECT_GT(r.report.value("peak_live_bytes", 0), 0);
  }

  // The property test's runs (below, where it is described).
  void run_chaos(std::span<const ChaosCase> cases);

  std::filesystem::path dir_;
  int time_limit_s_ = 0;                     // > 0: the program is killed after this long (exit status 137)
  std::string extra_env_;                    // more NAME=VALUE settings for the program, each followed by a space
  std::string report_name_ = "report.json";  // in dir_; with %p, one per process (read them with reports())

  // Every report in dir_ whose name starts with `prefix`, parsed.
  std::vector<nlohmann::json> reports(const std::string& prefix) const {
    std::vector<nlohmann::json> out;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      if (entry.path().filename().string().rfind(prefix, 0) != 0) continue;
      std::ifstream in(entry.path());
      out.push_back(nlohmann::json::parse(in, nullptr, false));
    }
    return out;
  }
};

TEST_F(Preload, SharedCudartCallsAreServedByTheRuntimeHooks) {
  ProgramRun plain;
  const ProgramRun r = both(PROBE_LINKED, "runtime", &plain);
  expect_all_returned(r, 8);
  EXPECT_EQ(count(r, "sim_cuMemAlloc"), 0) << "every cudaMalloc came from the pool";
  EXPECT_EQ(count(plain, "cudart_malloc_calls"), 7);
  // Only the call that records the double free's error reaches cudart.
  EXPECT_LE(count(r, "cudart_malloc_calls"), 1);
  EXPECT_EQ(r.report.value("ooms", -1), 1);
}

TEST_F(Preload, DriverExportsAreServedAndForeignPointersPassThrough) {
  ProgramRun plain;
  const ProgramRun r = both(PROBE_LINKED, "driver", &plain);
  expect_all_returned(r, 9);
  EXPECT_EQ(count(r, "sim_cuMemAlloc"), 0);
  EXPECT_GT(count(plain, "sim_cuMemAlloc"), 0);
  // A cudaFree-style pair and a stream-ordered one ask nothing about
  // captures until the program begins one; then each allocation and
  // stream-ordered free asks (the pool may ask too, at a barrier).
  EXPECT_EQ(count(r, "capture_questions_before"), 0);
  EXPECT_GE(count(r, "capture_questions_after"), 3);
}

// A program whose only captures begin with cuStreamBeginCaptureToGraph, in
// either form, and end in the same form: the capture is seen. The begin
// hook is what the probe's own check proves (the allocation inside the
// capture reached the driver, and its graph came back); the questions after
// would follow from the end hook alone.
TEST_F(Preload, ACaptureBegunIntoTheProgramsOwnGraphIsSeen) {
  for (const char* mode : {"capture_to_graph", "capture_to_graph_ptsz"}) {
    const ProgramRun r = both(PROBE_LINKED, mode);
    EXPECT_EQ(count(r, "capture_questions_before"), 0) << mode;
    EXPECT_GE(count(r, "capture_questions_after"), 3) << mode;
    ASSERT_TRUE(r.report.is_object()) << mode << ": no report written; stderr:\n" << r.err;
    EXPECT_EQ(r.report.value("live_bytes", -1), 0) << mode;
  }
}

TEST_F(Preload, ThreadsOnStreamsOfTheirOwnShareThePool) {
  const ProgramRun r = both(PROBE_LINKED, "threads");
  ASSERT_TRUE(r.report.is_object()) << r.err;
  EXPECT_EQ(r.report.value("allocations", -1), 8 * 300);
  EXPECT_EQ(r.report.value("frees", -1), 8 * 300);
  EXPECT_EQ(r.report.value("live_bytes", -1), 0);
}

// The new owners write from the host, as a NIC or cuFile would: free_barrier:off.
TEST_F(Preload, CudaFreeUnderASideStreamsQueuedWriteIsNotReusedUntilItLands) {
  const ProgramRun r = both(PROBE_LINKED, "sidestream", nullptr, "device_limit:8MiB,free_barrier:off");
  expect_all_returned(r, 6);
  EXPECT_EQ(r.report.value("device_barriers", -1), 0);
}

// The new owners write through a stream: the frees came back behind a device
// barrier, and the old writers' queued writes still landed first.
TEST_F(Preload, CudaFreeBehindABarrierKeepsQueuedWritesBeforeTheNewOwners) {
  const ProgramRun r = both(PROBE_LINKED, "sidestream_ordered", nullptr, "device_limit:8MiB");
  expect_all_returned(r, 6);
  EXPECT_GE(r.report.value("device_barriers", -1), 1);
}

// Cached cudaFree-style pairs while an idle non-blocking stream exists: each
// batch goes back behind a device barrier, and with no work queued since the
// newest barrier's record, the barrier stands on it and queues nothing.
// (Stitching's barriers, early on, may stand too.) With a set on the legacy stream before
// each free (on the legacy stream, a blocking stream or the per-thread
// default stream), no barrier stands on an old record; either way the stream's
// next set lands after every earlier one.
TEST_F(Preload, CudaFreeBarriersWithNothingQueuedSinceStandOnTheLastOnesEvent) {
  const ProgramRun idle = both(PROBE_LINKED, "idle_stream_pairs");
  expect_all_returned(idle, 402);
  const int barriers = idle.report.value("device_barriers", -1);
  EXPECT_GE(barriers, 100) << "one batch per cycle of five sizes or so";
  const int standing = idle.report.value("standing_barriers", -1);
  EXPECT_GE(standing, barriers - 1) << "all but the first, which joins the stream";
  EXPECT_LE(standing, barriers + idle.report.value("stitching_barriers", 0) - 1);
  for (const char* mode : {"idle_stream_pairs_with_work", "idle_stream_pairs_with_blocking_work",
                           "idle_stream_pairs_with_per_thread_work"}) {
    const ProgramRun busy = both(PROBE_LINKED, mode);
    expect_all_returned(busy, 402);
    EXPECT_GE(busy.report.value("device_barriers", -1), 100) << mode;
    EXPECT_EQ(busy.report.value("standing_barriers", -1), 0) << mode << ": each barrier had a set to cover";
  }
}

// A program that queues all its work on the legacy stream: its order puts
// the frees back, with no barrier queued and no driver call, and the old
// writes still land before the new owners' sets.
TEST_F(Preload, CudaFreeOnlyOnTheLegacyStreamComesBackInItsOrderWithNoBarrier) {
  expect_frees_came_back("legacy_stream", "device_limit:8MiB", 6, /*in_legacy_order=*/true);
}

// A second device's context made current (the context hooks hear of it):
// the first context's legacy stream orders nothing of its work, and no
// barrier of the pool's context orders it either, so the frees after it
// come back once their fences have passed (and the other context's work is
// done), and every byte is right.
TEST_F(Preload, CudaFreeAfterASecondContextIsMadeCurrentComesBackAfterItsFenceNotABarrier) {
  extra_env_ = "TIDEPOOL_SIM_DEVICES=2 ";
  // The second context a device's primary one made current, or one the
  // program creates (cuCtxCreate makes it current, with no cuCtxSetCurrent).
  for (const char* mode : {"legacy_then_second_context", "legacy_then_created_context"}) {
    const ProgramRun r = both(PROBE_LINKED, mode, nullptr, "device_limit:8MiB");
    expect_all_returned(r, 12);
    EXPECT_GE(r.report.value("legacy_order_barriers", -1), 1) << mode;
    EXPECT_EQ(r.report.value("device_barriers", -1), 0) << mode;
  }
}

// The same writes on the per-thread default stream, which no creation
// announces: the launch hook hears of it, and the frees come back behind a
// queued barrier again.
TEST_F(Preload, CudaFreeAfterWorkOnAPerThreadStreamComesBackBehindAQueuedBarrier) {
  expect_frees_came_back("per_thread_stream", "device_limit:8MiB", 6, /*in_legacy_order=*/false);
}

// No launch at all: a stream write on the per-thread stream (its hook hears
// of the stream) is the old work, and the new owner's set on another
// thread's per-thread stream still lands after it.
TEST_F(Preload, CudaFreeAfterAStreamWriteOnAPerThreadStreamComesBackBehindAQueuedBarrier) {
  expect_frees_came_back("per_thread_write", "device_limit:4MiB", 3, /*in_legacy_order=*/false);
}

// The same old write inside a cuStreamBatchMemOp, and as a batched copy
// (cuMemcpyBatchAsync): their hooks hear of the stream too.
TEST_F(Preload, CudaFreeAfterABatchedWriteOnAPerThreadStreamComesBackBehindAQueuedBarrier) {
  expect_frees_came_back("per_thread_batch_write", "device_limit:4MiB", 3, /*in_legacy_order=*/false);
}

TEST_F(Preload, CudaFreeAfterABatchedCopyOnAPerThreadStreamComesBackBehindAQueuedBarrier) {
  expect_frees_came_back("per_thread_batch_copy", "device_limit:4MiB", 3, /*in_legacy_order=*/false);
}

// The same old write through the pre-11.7 ABI (cuStreamWriteValue32 and
// cuStreamBatchMemOp by their own names), as a program built then calls it.
TEST_F(Preload, CudaFreeAfterAStreamWriteOfThePre117AbiComesBackBehindAQueuedBarrier) {
  expect_frees_came_back("per_thread_write_v1", "device_limit:4MiB", 3, /*in_legacy_order=*/false);
  expect_frees_came_back("per_thread_batch_write_v1", "device_limit:4MiB", 3, /*in_legacy_order=*/false);
}

// Live data four times the budget, touched by kernels in random order with
// both kinds of free beside them: every byte checked, the budget never
// exceeded (the probe watches the sim's device bytes).
TEST_F(Preload, EvictionKeepsLiveDataFourTimesTheBudgetIntact) {
  const ProgramRun r = both(PROBE_LINKED, "evict", nullptr, "device_limit:16MiB,evict:on,prefetch:off");
  expect_all_returned(r, 16);
  // Every launch is scanned, so that its blocks stay put until it is
  // queued; prefetch:off brings nothing back for it.
  EXPECT_EQ(launches(r, "scanned"), 105);
  EXPECT_EQ(r.report.value("launch_prefetches", -1), 0);
  EXPECT_EQ(r.report.value("prefetched_bytes", -1), 0);
  EXPECT_GT(r.report.value("host_resident_launches", 0), 0) << "kernels read evicted blocks where they are";
  EXPECT_GT(r.report.value("evictions", 0), 0);
  EXPECT_GT(r.report.value("residency_gates", 0), 0) << "moves under the preload are gated on the device";
  EXPECT_EQ(r.report.value("residency_fallbacks", -1), 0);
  EXPECT_EQ(r.report.value("ooms", -1), 0);
}

// With prefetch:launch, each kernel's blocks come back before it runs.
TEST_F(Preload, LaunchPrefetchBringsEvictedBlocksBackBeforeTheKernel) {
  const ProgramRun r = both(PROBE_LINKED, "evict", nullptr, "device_limit:16MiB,evict:on,prefetch:launch");
  expect_all_returned(r, 16);
  EXPECT_GT(r.report.value("evictions", 0), 0);
  EXPECT_GT(r.report.value("launch_prefetches", 0), 0);
  EXPECT_GT(r.report.value("prefetched_bytes", 0), 0);
  EXPECT_EQ(r.report.value("host_resident_launches", -1), 0);
  // The probe's launches: 8 fills, 40 rounds of a check and a fill, 4 of two
  // more fills, 8 checks, each naming a pool block; then one on host memory.
  EXPECT_EQ(launches(r, "scanned"), 105);
  EXPECT_EQ(launches(r, "naming_blocks"), 104);
  EXPECT_EQ(launches(r, "unread"), 0) << "library kernels are described by cuKernelGetParamInfo";
}

// compress:zero: the probe's blocks are half zeros, so evicted pages cross
// to the host compressed and come back unpacked before each kernel that
// names them; every word is checked by kernels.
TEST_F(Preload, CompressedEvictionKeepsHalfZeroDataIntactInLittleOverHalfItsBytes) {
  const ProgramRun r =
      both(PROBE_LINKED, "evict", nullptr, "device_limit:16MiB,evict:on,prefetch:launch,compress:zero");
  expect_all_returned(r, 16);
  if (!r.report.value("compressing", false)) GTEST_SKIP() << "built without nvcc: no kernels";
  EXPECT_GT(r.report.value("evictions", 0), 0);
  EXPECT_GT(r.report.value("compressed_pages", 0), 0);
  EXPECT_EQ(r.report.value("raw_by_sample_pages", -1), 0);
  EXPECT_GT(r.report.value("compression_ratio", 0.0), 1.7);
  EXPECT_LT(r.report.value("compression_ratio", 0.0), 2.0) << "half the words are not zero";
  EXPECT_EQ(r.report.value("expand_failures", -1), 0);
  EXPECT_EQ(r.report.value("ooms", -1), 0);
  EXPECT_EQ(r.report.value("host_resident_launches", -1), 0);
}

// prefetch:learn on a program that never repeats (blocks touched in random
// order): no period is found, so it moves nothing without a gate and acts as
// prefetch:launch; the probe checks every byte and the budget.
TEST_F(Preload, LearnedPrefetchOnAProgramWithoutStepsActsAsLaunchPrefetch) {
  const ProgramRun r = both(PROBE_LINKED, "evict", nullptr, "device_limit:16MiB,evict:on,prefetch:learn");
  expect_all_returned(r, 16);
  EXPECT_GT(r.report.value("evictions", 0), 0);
  EXPECT_GT(r.report.value("launch_prefetches", 0), 0);
  EXPECT_EQ(r.report.value("learned_period", -1), 0);
  EXPECT_EQ(r.report.value("tracked_moves", -1), 0);
  EXPECT_EQ(r.report.value("host_resident_launches", -1), 0);
}

// Kernels from one host thread on a block another thread's allocations keep
// evicting (PyTorch's autograd thread launches the backward pass while the
// main thread allocates), with the first thread's stream non-blocking,
// blocking or the legacy stream, under launch and learned prefetch: every
// word its kernels check is right, and the block moved out and back.
TEST_F(Preload, KernelsOfAnotherThreadKeepTheirBlockIntactWhileItIsEvictedAndBroughtBack) {
  time_limit_s_ = 60;  // a hang is a failure, not a stuck suite
  // Under a sanitizer every kernel word costs many times more: fewer rounds.
  const std::string rounds = sanitizer_preload_prefix().empty() ? "200" : "16";
  for (const char* kind : {"nonblocking", "blocking", "legacy"}) {
    for (const char* mode : {"launch", "learn"}) {
      SCOPED_TRACE(std::string(kind) + ", prefetch:" + mode);
      extra_env_ = std::string("PROBE_STREAM_KIND=") + kind + " PROBE_ROUNDS=" + rounds + " ";
      const std::string conf = std::string("device_limit:16MiB,evict:on,prefetch:") + mode;
      const ProgramRun r = run(PROBE_LINKED, "evict_threads", conf.c_str());
      EXPECT_EQ(r.status, 42) << r.err;
      EXPECT_NE(r.err.find("0 wrong words, 0 failed calls"), std::string::npos) << r.err;
      ASSERT_TRUE(r.report.is_object()) << r.err;
      EXPECT_GT(r.report.value("evictions", 0), 0);
      EXPECT_EQ(r.report.value("residency_fallbacks", -1), 0);
    }
  }
}

// The residency rule's first half (pool/page_mover.hpp): a launch that has
// named its block but is not queued yet keeps that block where it is. Thread
// A's launch on a non-blocking stream is held inside the driver call while
// thread B's allocation makes room, and B is held inside its gate until A's
// kernel runs, so A's kernel lands in the gate's window; the largest block,
// A's, is the one eviction would take. Without the pins, the gate remaps
// A's pages under its running kernel (the sim counts a fault) and words are
// lost.
TEST_F(Preload, ALaunchOnItsWayToTheDriverKeepsItsBlockWhereItIsThroughAnotherThreadsGate) {
  time_limit_s_ = 60;
  extra_env_ = "TIDEPOOL_SIM_COPY_GBPS=2 ";
  for (const char* mode : {"off", "launch", "learn"}) {
    SCOPED_TRACE(std::string("prefetch:") + mode);
    const std::string conf = std::string("device_limit:16MiB,evict:on,evict_policy:largest,prefetch:") + mode;
    const ProgramRun r = run(PROBE_RACES, "window", conf.c_str());
    EXPECT_EQ(r.status, 42) << r.err;
    EXPECT_NE(
        r.err.find("the gate was held with A's launch in it; 0 remaps under running work, 0 runs reaching unmapped VA"),
        std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("0 wrong words, 0 failed calls"), std::string::npos) << r.err;
    ASSERT_TRUE(r.report.is_object()) << r.err;
    EXPECT_GT(r.report.value("evictions", 0), 0);
  }
}

// The program's own copies under learned prefetch (issue 26, item 2): each
// step copies its next batch into a persistent block with cuMemcpyHtoD and,
// once its stream is synchronised, reads blocks back with cuMemcpyDtoH.
// Neither names its block in a launch; the copy hooks mark the blocks used,
// bring them back and order the copy after tidepool's own copies of them.
// The same copies as batches (cuMemcpyBatchAsync): every copy of a batch is
// guarded as a single copy is. And through CUDA arrays (cuMemcpyAtoD and
// cuMemcpyDtoA, and cuMemcpy3DBatchAsync's pointer operands): the block's
// side is guarded as a linear copy's is, through the same guard, so
// prefetch:launch alone checks it (learn's runs would double the time).
// One test per route, each within its own time limit (a route takes about
// 27 s under TSan).
class TheProgramsOwnCopies : public Preload, public ::testing::WithParamInterface<const char*> {};

TEST_P(TheProgramsOwnCopies, SeeEveryByteWhileBlocksMoveWithoutAGate) {
  time_limit_s_ = 120;
  extra_env_ = "TIDEPOOL_SIM_COPY_GBPS=2 ";
  const char* route = GetParam();
  {
    const bool through_arrays =
        std::string(route).find("array") != std::string::npos || std::string(route).find("3d") != std::string::npos;
    for (const char* mode : {"launch", "learn"}) {
      if (through_arrays && std::string(mode) == "learn") continue;
      SCOPED_TRACE(std::string(route) + " prefetch:" + mode);
      const std::string conf = std::string("device_limit:48MiB,evict:on,prefetch:") + mode;
      const ProgramRun r = run(PROBE_RACES, route, conf.c_str());
      EXPECT_EQ(r.status, 42) << r.err;
      EXPECT_NE(r.err.find("0 wrong words, 0 failed calls"), std::string::npos) << r.err;
      // Brought back before each copy was queued: none read or wrote a
      // block over the bus.
      EXPECT_EQ(count(r, "host_resident_copies"), 0);
      ASSERT_TRUE(r.report.is_object()) << r.err;
      EXPECT_GT(r.report.value("evictions", 0), 0);
      if (std::string(mode) == "learn") {
        EXPECT_GT(r.report.value("learned_period", 0), 0);
        EXPECT_GT(r.report.value("tracked_moves", 0), 0) << "the step's blocks moved without a gate";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Routes, TheProgramsOwnCopies,
                         ::testing::Values("copies", "batch_copies", "array_copies", "batch_3d_copies"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// A kernel the driver does not describe (neither query answers for it, here
// the fill kernel's first) under learned prefetch: its launches cannot be
// read, so they might use any block. The first one turns learned moves off
// for the run: every move is gated from then on, the report counts the
// launches, stderr says why, and every byte is right.
TEST_F(Preload, ALaunchTheScanCannotReadTurnsLearnedMovesOff) {
  time_limit_s_ = 120;
  extra_env_ = "TIDEPOOL_SIM_COPY_GBPS=2 TIDEPOOL_SIM_FAULTS=cuKernelGetParamInfo:1:400 ";
  const ProgramRun r = run(PROBE_RACES, "copies", "device_limit:48MiB,evict:on,prefetch:learn");
  EXPECT_EQ(r.status, 42) << r.err;
  EXPECT_NE(r.err.find("0 wrong words, 0 failed calls"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("learned moves are off"), std::string::npos) << r.err;
  ASSERT_TRUE(r.report.is_object()) << r.err;
  EXPECT_GT(launches(r, "unread"), 0);
  EXPECT_GT(launches(r, "naming_blocks"), 0) << "the check kernel is still read";
  EXPECT_GT(r.report.value("evictions", 0), 0);
  EXPECT_EQ(r.report.value("tracked_moves", -1), 0);
  EXPECT_EQ(r.report.value("precopies", -1), 0);
}

// A capture in progress (issue 26, item 3): a global-mode capture on one
// thread's non-blocking stream while another thread's allocation needs room
// and a launch into the capture names a block on the host. Nothing moves and
// nothing synchronises the context meanwhile, so the capture ends with a
// graph; the allocation either finds room or fails for lack of memory.
TEST_F(Preload, ACaptureInProgressIsNeverInvalidatedByAMove) {
  time_limit_s_ = 60;
  for (const char* mode : {"off", "launch", "learn"}) {
    SCOPED_TRACE(std::string("prefetch:") + mode);
    const std::string conf = std::string("device_limit:16MiB,evict:on,prefetch:") + mode;
    const ProgramRun r = run(PROBE_RACES, "capture", conf.c_str());
    EXPECT_EQ(r.status, 42) << r.err;
    EXPECT_NE(r.err.find("capture: ended with 0, a graph"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("0 wrong words, 0 failed calls"), std::string::npos) << r.err;
  }
}

// Graph launches (issue 26, item 4): a captured graph's kernel updates a
// block each round while other allocations keep evicting. The graph's
// kernel nodes are scanned at instantiation and their blocks held on the
// device, so with launch or learned prefetch no kernel run reads host pages
// (before: every round's graph run did), and the block ends with every
// update.
TEST_F(Preload, ABlockAnInstantiatedGraphNamesStaysOnTheDeviceWhileTheGraphExists) {
  time_limit_s_ = 60;
  for (const char* mode : {"off", "launch", "learn"}) {
    SCOPED_TRACE(std::string("prefetch:") + mode);
    const std::string conf = std::string("device_limit:24MiB,evict:on,prefetch:") + mode;
    const ProgramRun r = run(PROBE_RACES, "graph", conf.c_str());
    EXPECT_EQ(r.status, 42) << r.err;
    EXPECT_NE(r.err.find("0 wrong words, 0 failed calls"), std::string::npos) << r.err;
    // prefetch:off reads any evicted block on the host, the checks' included.
    if (std::string(mode) != "off") {
      EXPECT_NE(r.err.find("graph: 0 kernel runs read host pages"), std::string::npos) << r.err;
    }
    ASSERT_TRUE(r.report.is_object()) << r.err;
    EXPECT_GT(r.report.value("evictions", 0), 0);
  }
}

// A graph's copy and set nodes, in a child graph: the blocks they touch are
// named by no kernel, so only reading the graph's nodes at instantiation
// holds them on the device (before: they were the first evicted, and every
// launch of the graph copied through host pages).
TEST_F(Preload, TheBlocksAGraphsCopiesAndSetsTouchStayOnTheDeviceChildGraphsIncluded) {
  time_limit_s_ = 60;
  for (const char* mode : {"off", "launch", "learn"}) {
    SCOPED_TRACE(std::string("prefetch:") + mode);
    const std::string conf = std::string("device_limit:24MiB,evict:on,prefetch:") + mode;
    const ProgramRun r = run(PROBE_RACES, "graph_nodes", conf.c_str());
    EXPECT_EQ(r.status, 42) << r.err;
    EXPECT_NE(r.err.find("0 wrong words, 0 failed calls"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("graph_nodes: 0 graph copies and sets touched host pages"), std::string::npos) << r.err;
    ASSERT_TRUE(r.report.is_object()) << r.err;
    EXPECT_GT(r.report.value("evictions", 0), 0);
  }
}

// Another device's blocks (issue 26, item 5): kernels on device 0 check and
// rewrite a block of device 1's pool while device 1's allocations need room.
// No gate of device 1 orders device 0's streams, so the block comes back
// with the host waiting for its copy and stays on the device (before: the
// kernels read it before its copy in had landed, 2,097,152 wrong words).
TEST_F(Preload, AnotherDevicesKernelsFindItsBlockInPlaceAndIntact) {
  time_limit_s_ = 60;
  extra_env_ = "TIDEPOOL_SIM_DEVICES=2 TIDEPOOL_SIM_COPY_GBPS=2 ";
  for (const char* mode : {"launch", "learn"}) {
    SCOPED_TRACE(std::string("prefetch:") + mode);
    const std::string conf = std::string("device_limit:16MiB,evict:on,prefetch:") + mode;
    const ProgramRun r = run(PROBE_RACES, "peer", conf.c_str());
    EXPECT_EQ(r.status, 42) << r.err;
    EXPECT_NE(r.err.find("peer: 0 remaps under running work, 0 runs reaching unmapped VA"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("0 wrong words, 0 failed calls"), std::string::npos) << r.err;
  }
}

// Each device's pool reserves VA where the process has room, so one pool's
// span can hold another's blocks. A launch naming such a block finds it in
// its own pool, which pins it and brings it back before the kernel runs.
TEST_F(Preload, ALaunchFindsItsBlockWhenAnotherDevicesPoolsSpanHoldsIt) {
  time_limit_s_ = 60;
  extra_env_ = "TIDEPOOL_SIM_DEVICES=2 ";
  const ProgramRun r = run(PROBE_RACES, "interleaved_spans", "device_limit:16MiB,evict:on,prefetch:launch");
  EXPECT_EQ(r.status, 42) << r.err;
  ASSERT_NE(r.err.find("interleaved_spans: X lies between device 0's segments"), std::string::npos)
      << "the layout this test needs did not arise: " << r.err;
  EXPECT_NE(r.err.find("interleaved_spans: 0 launches read host pages"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("0 wrong words, 0 failed calls"), std::string::npos) << r.err;
  ASSERT_TRUE(r.whole.is_object()) << r.err;
  ASSERT_EQ(r.whole["devices"].size(), 2U) << r.whole.dump();
  EXPECT_GE(r.whole["devices"][1].value("evicted_bytes", 0L), 8L << 20) << "X went to the host before its launch";
}

// A cudaFree-style free of a block another device still writes through
// peer access waits for that device's work, as native cudaFree does, in
// either free_barrier mode: the block is not reused under it.
TEST_F(Preload, ACudaFreeWaitsForAnotherDevicesWorkOnTheBlock) {
  time_limit_s_ = 60;
  extra_env_ = "TIDEPOOL_SIM_DEVICES=2 ";
  for (const char* conf : {"free_barrier:on", "free_barrier:off"}) {
    SCOPED_TRACE(conf);
    const ProgramRun r = run(PROBE_RACES, "peer_free", conf);
    EXPECT_EQ(r.status, 42) << r.err;
    ASSERT_NE(r.err.find("peer_free: Y took X"), std::string::npos) << "the free's block was not reused: " << r.err;
    EXPECT_NE(r.err.find("; 0 bytes of Y overwritten"), std::string::npos) << r.err;
  }
}

// A barrier leaves a non-blocking stream with nothing queued since it was
// last joined to catch up at its next submission: that submission (a set of
// the block a cudaFree-style free gave back) waits for the barrier as it is
// queued, after the legacy stream's slow kernel that wrote the block. The
// barrier itself queues no wait; the set queues one. Without a barrier
// (free_barrier:off) nothing catches up, and the free's fence keeps order.
TEST_F(Preload, AnIdleStreamABarrierLeftBehindCatchesUpBeforeItsNextSubmission) {
  for (const char* conf : {"free_barrier:on", "free_barrier:off"}) {
    SCOPED_TRACE(conf);
    const ProgramRun r = run(PROBE_RACES, "idle_stream", conf);
    EXPECT_EQ(r.status, 42) << r.err;
    ASSERT_NE(r.err.find("idle_stream: Y took X"), std::string::npos) << "the free's block was not reused: " << r.err;
    EXPECT_NE(r.err.find("; 0 bytes of Y overwritten"), std::string::npos) << r.err;
    if (std::string(conf) == "free_barrier:on") {
      EXPECT_NE(r.err.find("0 waits queued by the barrier, 1 by the set"), std::string::npos) << r.err;
    }
  }
}

// A block handed out over host pages of a freed block: the pages come back
// through copies behind a gate of its device's streams only. Another
// device's kernel that writes the block at once, through peer access, runs
// after those copies and keeps what it wrote, with every prefetch mode.
// Before, the copies landed over it (slow copies make them last).
TEST_F(Preload, AnotherDevicesFirstKernelOnABlockRunsAfterTheCopiesThatBroughtItsPagesBack) {
  time_limit_s_ = 60;
  extra_env_ = "TIDEPOOL_SIM_DEVICES=2 TIDEPOOL_SIM_COPY_GBPS=1 ";
  races_in_every_prefetch_mode("peer_after_bring_back", [](const ProgramRun& r) {
    ASSERT_NE(r.err.find("peer_after_bring_back: Y took X"), std::string::npos)
        << "the layout this test needs did not arise: " << r.err;
    EXPECT_NE(r.err.find("; 0 words of Y wrong"), std::string::npos) << r.err;
    ASSERT_TRUE(r.whole.is_object()) << r.err;
    ASSERT_EQ(r.whole["devices"].size(), 1U) << "device 0 allocates nothing: " << r.whole.dump();
    EXPECT_EQ(r.whole["devices"][0].value("device", -1), 1);
    EXPECT_GE(r.whole["devices"][0].value("evicted_bytes", 0L), 8L << 20) << "X went to the host before its free";
  });
}

// A copy queued on the stream of a device without a pool reaches device
// 0's block as a peer's would (copies need no peer access), and no gate of
// device 0 orders that stream: the block is held where it was when the copy
// was queued, rather than evicted under it, in every prefetch mode. Before,
// with one pool and no peer access, the copy counted as device 0's own.
TEST_F(Preload, ACopyOnAnotherDevicesStreamKeepsItsBlockWhereItWasThoughThatDeviceHasNoPool) {
  time_limit_s_ = 60;
  extra_env_ = "TIDEPOOL_SIM_DEVICES=2 ";
  races_in_every_prefetch_mode("copy_from_poolless_device", [](const ProgramRun& r) {
    EXPECT_NE(r.err.find("copy_from_poolless_device: 0 copies reached host pages, 0 words copied wrong"),
              std::string::npos)
        << r.err;
    ASSERT_TRUE(r.whole.is_object()) << r.err;
    ASSERT_EQ(r.whole["devices"].size(), 1U) << "device 1 allocates nothing: " << r.whole.dump();
    EXPECT_GE(r.whole["devices"][0].value("evicted_bytes", 0L), 8L << 20) << "no room was taken under the copy";
  });
}

// A context the program creates on the pool's own device reaches the
// pool's blocks with no peer access, and no gate of the pool's (primary)
// context orders its streams: a kernel queued there holds its block where
// it was, rather than the block being evicted under it, in every prefetch
// mode. Before, with one pool, every launch counted as the pool's own.
TEST_F(Preload, AKernelInAContextTheProgramCreatedKeepsItsBlockWhereItWas) {
  time_limit_s_ = 60;
  races_in_every_prefetch_mode("created_context", [](const ProgramRun& r) {
    EXPECT_NE(r.err.find("created_context: 0 launches read host pages"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("0 wrong words, 0 failed calls"), std::string::npos) << r.err;
    ASSERT_TRUE(r.report.is_object()) << r.err;
    EXPECT_GE(r.report.value("evicted_bytes", 0L), 8L << 20) << "no room was taken under the kernel";
  });
}

// Memory pools (issue 29): a pool the program made the device's current one
// serves its cuMemAllocAsync calls, as natively, until it is destroyed;
// cuMemAllocFromPoolAsync is the driver's; only the default pool's
// allocations are tidepool's. Before, tidepool served them all.
TEST_F(Preload, AMemoryPoolTheProgramSetServesItsStreamOrderedAllocations) {
  ProgramRun native;
  const ProgramRun r = both(PROBE_LINKED, "mempool", &native);
  const char* expected = "mempool: 2 of 2 from the program's pool, 0 after it was destroyed, 0 wrong words";
  EXPECT_NE(native.err.find(expected), std::string::npos) << native.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  ASSERT_TRUE(r.report.is_object()) << r.err;
  EXPECT_EQ(r.report.value("allocations", -1), 2);  // the default pool's, before and after
  EXPECT_EQ(r.report.value("frees", -1), 2);
  EXPECT_EQ(r.report.value("passthrough_allocations", -1), 1);  // cuMemAllocAsync while the program's pool was current
  // Both of the program pool's blocks count as held outside tidepool's, until freed.
  EXPECT_EQ(r.report.value("peak_foreign_bytes", -1L), 2L << 20) << r.report.dump();
  EXPECT_EQ(r.report.value("foreign_bytes", -1L), 0) << r.report.dump();
}

// Device memory a library makes itself (issue 29): NCCL's buffers come from
// cuMemCreate, which tidepool does not serve. They count against the budget
// until the driver lets them go (released and unmapped): the pool gives back
// the free pages it kept beyond what is left, holds only that, and the
// report names the library. Before, the pool filled the whole budget beside
// them.
TEST_F(Preload, DeviceMemoryMadeOutsideThePoolCountsAgainstTheBudgetAndIsReported) {
  ProgramRun native;
  const ProgramRun r = both(PROBE_LINKED, "foreign", &native, "device_limit:64MiB");
  EXPECT_NE(native.err.find("foreign: 10 blocks before, 10 beside 40 MiB made outside, 10 after it was unmapped"),
            std::string::npos)
      << native.err;
  EXPECT_NE(r.err.find("foreign: 8 blocks before, 3 beside 40 MiB made outside, 8 after it was unmapped"),
            std::string::npos)
      << r.err;
  ASSERT_TRUE(r.report.is_object()) << r.err;
  EXPECT_EQ(r.report.value("foreign_bytes", -1L), 0);
  EXPECT_EQ(r.report.value("peak_foreign_bytes", -1L), 40L << 20);
  EXPECT_LE(r.report.value("peak_reserved_bytes", -1L), 64L << 20);
  ASSERT_EQ(r.report["foreign_owners"].size(), 1u) << r.report.dump();
  EXPECT_NE(r.report["foreign_owners"][0].value("library", std::string()).find("probe_linked"), std::string::npos)
      << r.report.dump();
  EXPECT_EQ(r.report["foreign_owners"][0].value("peak_bytes", -1L), 40L << 20);
}

// IPC (issue 29): two processes share blocks through cuIpcGetMemHandle /
// cuIpcOpenMemHandle both ways, with kernels reading and writing them, as
// torch.multiprocessing shares CUDA tensors. Legacy IPC refuses VMM memory,
// so before tidepool's own handles every open of a pool block failed. The
// exporter frees its blocks while the importer holds them and keeps
// allocating: nothing is reused under the importer, nothing leaks once it
// closes or dies, and another user's process is refused.
TEST_F(Preload, TwoProcessesShareBlocksThroughIpcHandlesAsTheyDoNatively) {
  time_limit_s_ = 60;
  const char* expected =
      "ipc: same handle 1, small block shared, own open refused; child saw 0 wrong, we see 0 and 0 wrong in theirs; "
      "after our free the child saw 0 wrong;";
  ProgramRun native;
  const ProgramRun plain = both(PROBE_IPC, "run", &native);
  EXPECT_NE(native.err.find(expected), std::string::npos) << native.err;
  for (const char* conf : {"", "device_limit:16MiB,evict:on,prefetch:launch"}) {
    SCOPED_TRACE(conf);
    const ProgramRun r = *conf == '\0' ? plain : run(PROBE_IPC, "run", conf);
    EXPECT_EQ(r.status, 42) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("ipc: a forged handle was refused"), std::string::npos) << r.err;
    if (::geteuid() == 0) {
      EXPECT_NE(r.err.find("stranger refused"), std::string::npos) << r.err;
    }
    EXPECT_NE(r.err.find("dier opened"), std::string::npos) << r.err;
    ASSERT_TRUE(r.report.is_object()) << r.err;
    // The parent's own: every block freed went back, the one a dead process held too.
    EXPECT_EQ(r.report.value("live_bytes", -1L), 0) << r.report.dump();
    EXPECT_EQ(r.report.value("allocations", -1L), r.report.value("frees", -2L)) << r.report.dump();
  }
  if (::geteuid() == 0) {
    EXPECT_NE(native.err.find("stranger refused"), std::string::npos) << native.err;
  }
  // Small pages: the child's 5 MiB block is 320 pages, sent in two batches of file descriptors.
  extra_env_ = "TIDEPOOL_SIM_GRANULARITY=16KiB ";
  const ProgramRun small_pages = run(PROBE_IPC, "run", "");
  EXPECT_EQ(small_pages.status, 42) << small_pages.err;
  EXPECT_NE(small_pages.err.find(expected), std::string::npos) << small_pages.err;
  EXPECT_EQ(small_pages.report.value("live_bytes", -1L), 0) << small_pages.report.dump();
  // A device without VMM: the pool's chunks travel as the driver's own handles.
  extra_env_ = "TIDEPOOL_SIM_FAULTS=cuMemGetAllocationGranularity:1:801 ";
  const ProgramRun chunks = run(PROBE_IPC, "run", "log:info");
  EXPECT_EQ(chunks.status, 42) << chunks.err;
  EXPECT_NE(chunks.err.find("no virtual memory management"), std::string::npos) << chunks.err;
  EXPECT_NE(chunks.err.find(expected), std::string::npos) << chunks.err;
  EXPECT_EQ(chunks.report.value("live_bytes", -1L), 0) << chunks.report.dump();
}

// One process per GPU (issue 29, as under torch.distributed): the IPC
// child runs on the second device, and both processes share blocks across
// devices. One TIDEPOOL_CONF with %p in the report path gives each process
// its own report, each with its own device's pool and figures.
TEST_F(Preload, OneProcessPerGpuEachHasItsOwnPoolAndReportAndTheyShareBlocks) {
  time_limit_s_ = 60;
  extra_env_ = "TIDEPOOL_SIM_DEVICES=2 PROBE_CHILD_DEVICE=1 ";
  report_name_ = "report-%p.json";
  const char* expected =
      "ipc: same handle 1, small block shared, own open refused; child saw 0 wrong, we see 0 and 0 wrong in theirs; "
      "after our free the child saw 0 wrong;";
  const ProgramRun r = run(PROBE_IPC, "run", "device_limit:16MiB,evict:on");
  EXPECT_EQ(r.status, 42) << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  std::map<int, long> allocations_by_device;  // from the reports of the parent and the child
  int with_allocations = 0;
  for (const nlohmann::json& report : reports("report-")) {
    ASSERT_TRUE(report.is_object() && report.contains("devices")) << report.dump();
    for (const auto& device : report["devices"]) {
      const long allocations = device.value("allocations", 0L);
      if (allocations == 0) continue;
      ++with_allocations;
      allocations_by_device[device.value("device", -1)] += allocations;
      EXPECT_EQ(device.value("live_bytes", -1L), 0) << device.dump();
      EXPECT_LE(device.value("peak_reserved_bytes", -1L), 16L << 20) << device.dump();
    }
  }
  EXPECT_EQ(with_allocations, 2) << "the parent's device 0 and the child's device 1, each in its own report";
  EXPECT_GT(allocations_by_device[0], 0);
  EXPECT_EQ(allocations_by_device[1], 1) << "the child's one block, on its own device";
}

// Peer access (issue 29): device 1's kernels reach device 0's pool blocks
// exactly while device 1 has peer access to device 0 (or, for stream-ordered
// blocks, while device 0's default memory pool grants it access), as they
// reach the driver's memory natively: blocks made before and after the enable, and
// blocks evicted to the host, which a pool page's access list must name too.
// Without the grant, every kernel of device 1 on a pool block faulted.
TEST_F(Preload, APeersKernelsReachThePoolExactlyWhileItsAccessIsEnabled) {
  time_limit_s_ = 60;
  extra_env_ = "TIDEPOOL_SIM_DEVICES=2 ";
  const char* expected =
      "faults before enable 1, while enabled 0 and 0, after disable 1; memory pool closed 1, open 0, closed again 1";
  ProgramRun native;
  const ProgramRun plain = both(PROBE_RACES, "peer_access", &native);
  EXPECT_NE(native.err.find(expected), std::string::npos) << native.err;
  EXPECT_NE(plain.err.find(expected), std::string::npos) << plain.err;
  for (const char* mode : {"launch", "learn"}) {
    SCOPED_TRACE(std::string("under a budget, prefetch:") + mode);
    const std::string conf = std::string("device_limit:16MiB,evict:on,prefetch:") + mode;
    const ProgramRun r = run(PROBE_RACES, "peer_access", conf.c_str());
    EXPECT_EQ(r.status, 42) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("0 wrong words, 0 failed calls"), std::string::npos) << r.err;
    ASSERT_TRUE(r.report.is_object()) << r.err;
    EXPECT_GT(r.report.value("evictions", 0L), 0);
  }
}

// The property test: several host threads, each with a stream of its own
// kind (legacy, blocking, non-blocking, per-thread default), allocating and
// freeing both ways, writing with kernels, memsets and copies, reading back
// with kernels and synchronous copies, under a budget a third of what they
// hold, in every prefetch mode; then spread over two devices, and with
// driver calls only tidepool makes failing now and then (a gate's wait, a
// map, a page's creation, an event record), and with blocks that share
// pages with their neighbours. Fixed seeds; fewer operations
// under a sanitizer. Every word checked through the device path is right,
// no call fails but for an out-of-memory allocation, and no page is
// remapped under a running kernel or copy that touches it. Three tests, so
// that each stays well inside the sanitizer's time limit.
void Preload::run_chaos(std::span<const ChaosCase> cases) {
  time_limit_s_ = 120;
  const std::string ops = sanitizer_preload_prefix().empty() ? "150" : "20";
  for (const ChaosCase& c : cases) {
    SCOPED_TRACE(std::string("prefetch:") + c.mode + ", seed " + c.seed + ", " + c.env);
    // Small blocks share pages, which never move: such a run reaches the
    // budget later, and there may refuse an allocation rather than evict.
    const bool small = std::string(c.env).find("PROBE_SIZES=small") != std::string::npos;
    const std::string case_ops = small && !sanitizer_preload_prefix().empty() ? "40" : ops;
    extra_env_ = std::string(c.env) + "TIDEPOOL_SIM_COPY_GBPS=8 PROBE_THREADS=5 PROBE_OPS=" + case_ops + " ";
    const std::string conf = std::string("device_limit:") + c.budget + ",evict:on,prefetch:" + c.mode;
    const ProgramRun r = run(PROBE_CHAOS, c.seed, conf.c_str());
    EXPECT_EQ(r.status, 42) << r.err;
    EXPECT_NE(r.err.find("chaos: 0 wrong words, 0 failed calls"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("tidepool sim: cuMemUnmap"), std::string::npos) << r.err;
    ASSERT_TRUE(r.report.is_object()) << r.err;
    long evictions = 0;  // on any device
    long refusals = 0;
    for (const auto& device : r.whole["devices"]) {
      evictions += device.value("evictions", 0L);
      refusals += device.value("ooms", 0L);
    }
    if (small) {
      EXPECT_GT(evictions + refusals, 0) << "the budget was never reached";
    } else {
      EXPECT_GT(evictions, 0);
    }
  }
}

TEST_F(Preload, RandomThreadsStreamsCopiesAndFreesUnderATightBudgetLoseNothing) {
  const ChaosCase cases[] = {{"off", "1", ""}, {"off", "2", ""}, {"launch", "1", ""}, {"launch", "2", ""}};
  run_chaos(cases);
}

TEST_F(Preload, RandomThreadsLoseNothingWhenPrefetchLearnsOrBlocksSharePages) {
  const ChaosCase cases[] = {{"learn", "1", ""}, {"learn", "2", ""}, {"launch", "5", "PROBE_SIZES=small ", "16MiB"}};
  run_chaos(cases);
}

TEST_F(Preload, RandomThreadsOnTwoDevicesWithFailingCallsAndPeersLoseNothing) {
  const std::string two = "TIDEPOOL_SIM_DEVICES=2 PROBE_DEVICES=2 ";
  const std::string two_with_faults =
      two + "TIDEPOOL_SIM_FAULTS=cuStreamWaitValue32_v2:7:2,cuMemMap:30:2,cuMemCreate:12:2,cuEventRecord:40:2 ";
  const std::string two_with_peers = two + "PROBE_PEER=1 ";
  const ChaosCase cases[] = {{"launch", "3", two.c_str(), "16MiB"},
                             {"learn", "6", two.c_str(), "16MiB"},
                             {"learn", "4", two_with_faults.c_str(), "16MiB"},
                             {"launch", "3", two_with_peers.c_str(), "16MiB"},
                             {"off", "5", two_with_peers.c_str(), "16MiB"}};
  run_chaos(cases);
}

TEST_F(Preload, AForkedChildExitsCleanlyAndLeavesTheReportToTheParent) {
  const ProgramRun r = both(PROBE_LINKED, "fork");
  expect_all_returned(r, 2);
}

TEST_F(Preload, AChildForkedWithWorkInFlightPassesThroughToTheDriverAndNeverHangs) {
  const ProgramRun r = both(PROBE_LINKED, "fork_alloc", nullptr, "device_limit:8MiB");
  expect_all_returned(r, 3);
  EXPECT_NE(r.err.find("in a forked child"), std::string::npos) << r.err;
}

TEST_F(Preload, HostileOutputPathsAreRefusedWithOneLineAndTheProgramRunsOn) {
  const std::string victim = (dir_ / "victim").string();
  std::ofstream(victim) << "precious";
  std::filesystem::create_symlink(victim, dir_ / "trace.csv");
  ASSERT_EQ(::mkfifo((dir_ / "log.fifo").c_str(), 0600), 0);  // no reader: a blocking open would hang
  const std::string conf =
      "log:info,trace:" + (dir_ / "trace.csv").string() + ",log_file:" + (dir_ / "log.fifo").string();
  const ProgramRun r = both(PROBE_LINKED, "runtime", nullptr, conf.c_str());
  expect_all_returned(r, 8);
  EXPECT_NE(r.err.find("symbolic link"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("FIFO"), std::string::npos) << r.err;
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "precious");
  EXPECT_TRUE(std::filesystem::is_symlink(dir_ / "trace.csv"));

  // A log_file in a directory that does not exist: no directory is made.
  const std::string missing = "log_file:" + (dir_ / "no" / "such" / "dir.log").string();
  const ProgramRun m = both(PROBE_LINKED, "runtime", nullptr, missing.c_str());
  expect_all_returned(m, 8);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "no"));
  EXPECT_NE(m.err.find("does not exist"), std::string::npos) << m.err;
}

TEST_F(Preload, ABudgetTheDeviceCannotHoldIsRefusedAndItsAllocationsPassThrough) {
  for (const char* conf : {"device_limit:32TiB", "device_limit:0.0000001%"}) {
    const ProgramRun r = both(PROBE_DLOPEN, "dlsym", nullptr, conf);
    EXPECT_NE(r.err.find("cannot work on device 0"), std::string::npos) << conf << "\n" << r.err;
    EXPECT_EQ(count(r, "sim_cuMemAlloc"), 6) << conf << ": the driver serves every allocation";
  }
}

TEST_F(Preload, DlopenAndDlsymGetTheHooks) {
  ProgramRun plain;
  const ProgramRun r = both(PROBE_DLOPEN, "dlsym", &plain);
  expect_all_returned(r, 9);
  EXPECT_EQ(count(r, "sim_cuMemAlloc"), 0);
  EXPECT_EQ(count(r, "sim_cuMemAllocAsync"), 1) << "only the allocation into a capture reaches the driver";
  EXPECT_EQ(count(r, "capture_questions_before"), 0);
  EXPECT_EQ(count(plain, "sim_cuMemAlloc"), 6);
}

TEST_F(Preload, CuGetProcAddressV1HandsOutTheHooks) {
  const ProgramRun r = both(PROBE_DLOPEN, "proc_v1");
  expect_all_returned(r, 9);
  EXPECT_EQ(count(r, "sim_cuMemAlloc"), 0);
  EXPECT_EQ(count(r, "sim_cuMemAllocAsync"), 1) << "only the allocation into a capture reaches the driver";
  EXPECT_EQ(count(r, "capture_questions_before"), 0);
}

TEST_F(Preload, CuGetProcAddressV2HandsOutTheHooksAndItself) {
  const ProgramRun r = both(PROBE_DLOPEN, "proc_v2");
  expect_all_returned(r, 9);
  EXPECT_EQ(count(r, "sim_cuMemAlloc"), 0);
  EXPECT_EQ(count(r, "sim_cuMemAllocAsync"), 1) << "only the allocation into a capture reaches the driver";
  EXPECT_EQ(count(r, "capture_questions_before"), 0);
}

TEST_F(Preload, ABadConfigurationIsOneLineAndEverythingPassesThrough) {
  const ProgramRun plain = run(PROBE_DLOPEN, "dlsym", nullptr);
  const ProgramRun r = run(PROBE_DLOPEN, "dlsym", "no_such_key:1");
  EXPECT_EQ(r.status, 42) << r.err;
  EXPECT_EQ(r.out, plain.out);
  EXPECT_NE(r.err.find("no_such_key"), std::string::npos) << r.err;
  EXPECT_EQ(count(r, "sim_cuMemAlloc"), 6) << "pass-through: the driver serves every call";
}

// cuLaunchKernel with the parameters packed in `extra`: scanned like any
// launch (its evicted blocks come back first), and a buffer that claims more
// than it holds is left to the driver, which refuses it, with no byte past
// the buffer read (the probe puts an inaccessible page right after it).
TEST_F(Preload, APackedLaunchIsScannedAndOneClaimingMoreThanItsBufferIsLeftToTheDriver) {
  for (const char* conf :
       {"device_limit:16MiB,evict:on,prefetch:launch", "device_limit:16MiB,evict:on,prefetch:learn"}) {
    const ProgramRun r = both(PROBE_HOSTILE, "extra_launch", nullptr, conf);
    expect_all_returned(r, 8);
    EXPECT_GT(r.report.value("evictions", 0), 0) << conf;
    EXPECT_GT(r.report.value("launch_prefetches", 0), 0) << conf << ": packed launches were not scanned";
    EXPECT_EQ(r.report.value("host_resident_launches", -1), 0) << conf;
  }
}

// A SIGINT handler that calls exit() while the thread it interrupted is
// inside the pool (holding its lock): the process ends as it does natively,
// the report is written with that device marked incomplete, and the log says
// why. It used to spin forever at 100% CPU.
TEST_F(Preload, ExitFromASignalHandlerInsideAPoolCallEndsTheProcessAndSaysWhatItLeftOut) {
  time_limit_s_ = 120;
  // The program's own handler calls exit(), which is not async-signal-safe:
  // under TSan that is reported (and the status changed) whatever tidepool
  // does. The test is about tidepool never hanging there.
  const char* tsan = std::getenv("TSAN_OPTIONS");
  extra_env_ =
      std::string("TSAN_OPTIONS=") + (tsan != nullptr ? std::string(tsan) + ":" : "") + "report_signal_unsafe=0 ";
  const ProgramRun plain = run(PROBE_HOSTILE, "sigint_native", nullptr);
  ASSERT_EQ(plain.status, 42) << plain.err;
  ASSERT_EQ(plain.out, "interrupted\n");
  const std::string traced = "log:info,trace:" + (dir_ / "trace.csv").string();
  for (const std::string& conf : {std::string(), std::string("log:info"), traced}) {
    const auto start = std::chrono::steady_clock::now();
    const ProgramRun r = run(PROBE_HOSTILE, "sigint_pool", conf.c_str());
    const auto seconds =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.status, 42) << conf << " (137: killed at the time limit, the process hung)\n" << r.err;
    EXPECT_EQ(r.out, plain.out) << conf;
    EXPECT_LT(seconds, 60) << conf;
    ASSERT_TRUE(r.report.is_object()) << conf << ": no report written\n" << r.err;
    EXPECT_EQ(r.report.value("complete", true), false) << conf;
    EXPECT_EQ(r.report.value("device_limit_bytes", std::uint64_t{0}), std::uint64_t{4} << 30) << conf;
    EXPECT_EQ(r.report.value("allocations", -1), 0) << conf << ": a busy pool's figures are left out";
    EXPECT_NE(r.err.find("still busy at exit"), std::string::npos) << conf << "\n" << r.err;
  }
}

}  // namespace
