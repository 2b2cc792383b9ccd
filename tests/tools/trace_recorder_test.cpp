// Specification of trace recording (`trace:PATH`): a run through the Runtime
// on the sim driver is written as RMM CSV that the replay tool reads back to
// the same events and replays; many threads lose nothing; the file is
// complete at finish(); a bad path is one log line and allocation goes on.
#include "runtime/trace_recorder.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "replay.hpp"
#include "runtime/runtime.hpp"
#include "support/program_code.hpp"
#include "support/sim_driver.hpp"

namespace tidepool::replay {
namespace {

using testing::code_of_this_program;

using util::MiB;

// Named per process: two test runs on one machine (two build trees) must not
// write each other's traces.
std::string temp_path(const std::string& name) {
  return std::string(::testing::TempDir()) + "/tidepool_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::uint64_t current_thread_id() { return static_cast<std::uint64_t>(::syscall(SYS_gettid)); }

std::unique_ptr<runtime::Runtime> traced_runtime(const std::string& trace_path) {
  runtime::Config config = runtime::parse_config("");
  config.cuda_lib = TIDEPOOL_SIM_LIBRARY;
  config.trace = trace_path;
  auto rt = runtime::Runtime::create(config);
  EXPECT_FALSE(rt->passthrough());
  return rt;
}

// What a test did, to compare with what the trace says.
struct Expected {
  TraceAction action;
  std::uint64_t pointer;
  std::uint64_t size;
  std::uint64_t stream;
};

// Two real streams on the sim's device 0, destroyed after the runtimes that
// used them are gone.
class SimStreams {
 public:
  SimStreams() : api_(testing::sim_driver().api()) {
    api_.init(0);
    api_.deviceGet(&device_, 0);
    api_.devicePrimaryCtxRetain(&context_, device_);
    driver::ScopedContext scope(api_, context_);
    for (CUstream& s : streams_) EXPECT_EQ(api_.streamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  ~SimStreams() {
    driver::ScopedContext scope(api_, context_);
    for (CUstream s : streams_) api_.streamDestroy(s);
    api_.devicePrimaryCtxRelease(device_);
  }
  SimStreams(const SimStreams&) = delete;
  SimStreams& operator=(const SimStreams&) = delete;
  [[nodiscard]] std::uintptr_t get(int i) const { return reinterpret_cast<std::uintptr_t>(streams_[i]); }

 private:
  const driver::Api& api_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream streams_[2] = {nullptr, nullptr};
};

std::vector<TraceEvent> load(const std::string& path) {
  std::vector<TraceEvent> events;
  std::string error;
  EXPECT_TRUE(load_trace(path, &events, &error)) << error;
  return events;
}

TEST(TraceRecorder, WritesRmmCsvLinesWithRmmTimes) {
  const std::string path = temp_path("recorder_lines.csv");
  auto opened = runtime::TraceRecorder::open(path);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  auto& recorder = *opened.value();
  recorder.record(TraceAction::allocate, 0x7f0000001000, 4096, 7);
  recorder.record(TraceAction::allocate_failure, 0, 1 << 30, 0);
  recorder.record(TraceAction::free, 0x7f0000001000, 4096, 7);
  recorder.flush();
  EXPECT_EQ(recorder.recorded(), 3u);
  EXPECT_EQ(recorder.written(), 3u);

  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "Thread,Time,Action,Pointer,Size,Stream,Owner");
  const std::string tid = std::to_string(current_thread_id());
  // RMM's logging_resource_adaptor writes `%t,%H:%M:%S.%f,...`; Owner is
  // empty where the caller is not known.
  const std::string time = R"(,\d\d:\d\d:\d\d\.\d{6},)";
  EXPECT_TRUE(std::regex_match(lines[1], std::regex(tid + time + "allocate,0x7f0000001000,4096,0x7,"))) << lines[1];
  EXPECT_TRUE(std::regex_match(lines[2], std::regex(tid + time + "allocate failure,0x0,1073741824,0,"))) << lines[2];
  EXPECT_TRUE(std::regex_match(lines[3], std::regex(tid + time + "free,0x7f0000001000,4096,0x7,"))) << lines[3];
}

TEST(TraceRecorder, OwnerNamesTheCallersLibraryAndReadsBack) {
  const std::string path = temp_path("recorder_owner.csv");
  auto call_sites = std::make_unique<runtime::CallSites>();
  auto opened = runtime::TraceRecorder::open(path, std::nullopt, call_sites.get());
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  auto& recorder = *opened.value();
  const auto in_libc = reinterpret_cast<std::uintptr_t>(::dlsym(RTLD_DEFAULT, "gnu_get_libc_version")) + 8;
  const auto in_program = reinterpret_cast<std::uintptr_t>(&code_of_this_program) + 1;
  recorder.record(TraceAction::allocate, 0x1000, 512, 0, call_sites->tag(in_libc));
  recorder.record(TraceAction::allocate, 0x2000, 1024, 0, call_sites->tag(in_program));
  recorder.record(TraceAction::allocate_failure, 0, 1 << 30, 0, call_sites->tag(in_libc));
  recorder.record(TraceAction::free, 0x1000, 512, 0);
  recorder.flush();
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_TRUE(std::regex_search(lines[1], std::regex(",512,0,libc\\.so[^,]*$"))) << lines[1];
  EXPECT_TRUE(lines[2].ends_with(std::string(",1024,0,") + program_invocation_short_name)) << lines[2];
  EXPECT_TRUE(std::regex_search(lines[3], std::regex("allocate failure,0x0,1073741824,0,libc\\.so"))) << lines[3];
  EXPECT_TRUE(lines[4].ends_with(",512,0,")) << lines[4];

  // The replay's reader takes the column back as names the events index.
  std::vector<TraceEvent> events;
  std::vector<std::string> owners;
  std::string error;
  ASSERT_TRUE(load_trace(path, &events, &error, nullptr, &owners)) << error;
  ASSERT_EQ(events.size(), 4u);
  ASSERT_EQ(owners.size(), 3u);
  EXPECT_EQ(owners[0], "");
  EXPECT_TRUE(owners[events[0].owner].starts_with("libc.so"));
  EXPECT_EQ(owners[events[1].owner], program_invocation_short_name);
  EXPECT_EQ(events[2].owner, events[0].owner);
  EXPECT_EQ(events[3].owner, 0u);
}

TEST(TraceRecorder, ReadsRmmsOwnSpellingsBack) {
  // printf's %p writes RMM's null pointer as (nil); streams are 0x-hex handles.
  TraceEvent e;
  ASSERT_TRUE(
      runtime::parse_trace_line("4242,13:07:59.123456,allocate failure,(nil),512,0x55d0c0ffee00", &e, nullptr).ok());
  EXPECT_EQ(e.action, TraceAction::allocate_failure);
  EXPECT_EQ(e.pointer, 0u);
  EXPECT_EQ(e.stream, 0x55d0c0ffee00u);
  EXPECT_EQ(e.time_us, ((13u * 60 + 7) * 60 + 59) * 1000000ull + 123456);
}

TEST(TraceRecorder, ProducersOutrunningTheWriterLoseNothing) {
  const std::string path = temp_path("recorder_flood.csv");
  auto opened = runtime::TraceRecorder::open(path);
  ASSERT_TRUE(opened.ok());
  auto& recorder = *opened.value();
  constexpr int kThreads = 4;
  constexpr std::uint64_t kEach = 3 * runtime::TraceRecorder::kCapacity;  // each thread alone wraps the ring
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&recorder, t] {
      for (std::uint64_t i = 0; i < kEach; ++i) {
        recorder.record(i % 2 == 0 ? TraceAction::allocate : TraceAction::free,
                        (static_cast<std::uint64_t>(t + 1) << 32) | (i / 2 * 512), 512 + t, 0);
      }
    });
  }
  for (auto& th : threads) th.join();
  recorder.flush();
  EXPECT_EQ(recorder.recorded(), kThreads * kEach);
  EXPECT_EQ(recorder.written(), kThreads * kEach);

  const auto events = load(path);
  ASSERT_EQ(events.size(), kThreads * kEach);
  std::vector<std::uint64_t> next(kThreads, 0);
  for (const TraceEvent& e : events) {
    const auto t = static_cast<int>(e.pointer >> 32) - 1;
    ASSERT_GE(t, 0);
    ASSERT_LT(t, kThreads);
    const std::uint64_t i = next[t]++;
    ASSERT_EQ(e.action, i % 2 == 0 ? TraceAction::allocate : TraceAction::free) << "line " << e.line;
    ASSERT_EQ(e.pointer & 0xffffffffu, i / 2 * 512) << "line " << e.line;
    ASSERT_EQ(e.size, 512u + static_cast<unsigned>(t));
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(next[t], kEach);
}

TEST(TraceRecorder, AGzNameWritesGzipMembersThatReadBackAsThePlainTrace) {
  const std::string plain_path = temp_path("recorder_plain.csv");
  const std::string gz_path = temp_path("recorder_packed.csv.gz");
  {
    auto plain = runtime::TraceRecorder::open(plain_path);
    auto packed = runtime::TraceRecorder::open(gz_path);
    ASSERT_TRUE(plain.ok() && packed.ok()) << packed.status().message();
    // Enough events for many writes (members), flushed between some of them.
    for (std::uint64_t i = 0; i < 3 * runtime::TraceRecorder::kCapacity; ++i) {
      for (auto* r : {plain.value().get(), packed.value().get()}) {
        r->record(i % 2 == 0 ? TraceAction::allocate : TraceAction::free, 0x7f0000000000 + i / 2 * 4096, 4096 + i % 7,
                  i % 3);
      }
      if (i % 50000 == 0) packed.value()->flush();
    }
  }
  // A gzip file, smaller than the text.
  std::ifstream in(gz_path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x1f);
  EXPECT_EQ(static_cast<unsigned char>(bytes[1]), 0x8b);
  EXPECT_LT(bytes.size() * 4, std::filesystem::file_size(plain_path));

  const auto plain = load(plain_path);
  const auto packed = load(gz_path);
  ASSERT_EQ(plain.size(), 3 * runtime::TraceRecorder::kCapacity);
  ASSERT_EQ(packed.size(), plain.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(packed[i].action, plain[i].action) << i;
    ASSERT_EQ(packed[i].pointer, plain[i].pointer) << i;
    ASSERT_EQ(packed[i].size, plain[i].size) << i;
    ASSERT_EQ(packed[i].stream, plain[i].stream) << i;
  }
}

TEST(TraceRecorder, AGzTraceContinuedByAReloadAppendsMembers) {
  const std::string path = temp_path("recorder_reload.csv.gz");
  const auto start = std::chrono::steady_clock::now();
  {
    auto first = runtime::TraceRecorder::open(path);
    ASSERT_TRUE(first.ok());
    first.value()->record(TraceAction::allocate, 0x1000, 512, 0);
  }
  {
    auto second = runtime::TraceRecorder::open(path, start);
    ASSERT_TRUE(second.ok());
    second.value()->record(TraceAction::free, 0x1000, 512, 0);
  }
  const auto events = load(path);  // one header: the second load appends lines only
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].action, TraceAction::allocate);
  EXPECT_EQ(events[1].action, TraceAction::free);
}

TEST(TraceRecorder, AForkedChildDoesNotWriteTheParentsTrace) {
  const std::string path = temp_path("recorder_fork.csv");
  auto opened = runtime::TraceRecorder::open(path);
  ASSERT_TRUE(opened.ok());
  auto& recorder = *opened.value();
  recorder.record(TraceAction::allocate, 0x1000, 64, 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    recorder.record(TraceAction::allocate, 0x2000, 64, 0);
    recorder.flush();
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  recorder.record(TraceAction::free, 0x1000, 64, 0);
  recorder.flush();
  const auto events = load(path);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].pointer, 0x1000u);
  EXPECT_EQ(events[1].action, TraceAction::free);
}

TEST(TraceRecorder, AnUnopenablePathIsAnIoErrorWithTheReason) {
  auto opened = runtime::TraceRecorder::open("/nonexistent-dir/trace.csv");
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().error(), util::Error::io_error);
  EXPECT_NE(std::string(opened.status().message()).find("does not exist"), std::string::npos)
      << opened.status().message();
}

TEST(RecordedRun, ReadsBackAndReplaysToTheSameEvents) {
  const std::string path = temp_path("recorded_run.csv");
  SimStreams sim_streams;
  std::vector<Expected> expected;
  std::uint64_t live = 0;
  std::uint64_t peak_live = 0;
  {
    auto rt = traced_runtime(path);
    ASSERT_NE(rt->trace(), nullptr);
    runtime::Allocator* allocator = rt->allocator(0);
    ASSERT_NE(allocator, nullptr);
    std::mt19937 rng(11);
    std::map<std::uintptr_t, std::size_t> held;
    const std::uintptr_t streams[] = {0, sim_streams.get(0), sim_streams.get(1)};
    for (int i = 0; i < 3000; ++i) {
      if (!held.empty() && (rng() % 2 == 0 || held.size() > 40)) {
        auto it = held.begin();
        std::advance(it, static_cast<long>(rng() % held.size()));
        ASSERT_TRUE(allocator->deallocate(it->first, 0, false).ok());
        expected.push_back({TraceAction::free, it->first, it->second, 0});
        live -= it->second;
        held.erase(it);
        continue;
      }
      // 100 B .. 12 MiB, small and large arenas both.
      const std::size_t size = (std::size_t{1} << (rng() % 17 + 7)) * (1 + rng() % 3) - rng() % 100;
      const std::uintptr_t stream = streams[rng() % 3];
      // Stream-ordered on a real stream (cudaMallocAsync), else cudaMalloc; all
      // are freed with cudaFree semantics.
      auto r = allocator->allocate(size, stream, stream != 0);
      ASSERT_TRUE(r.ok()) << r.status().message();
      expected.push_back({TraceAction::allocate, r.value(), size, stream});
      held.emplace(r.value(), size);
      live += size;
      peak_live = std::max(peak_live, live);
    }
    // A refused request is recorded as RMM's "allocate failure".
    const std::size_t impossible = std::size_t{1} << 62;
    EXPECT_FALSE(allocator->allocate(impossible, 0, false).ok());
    expected.push_back({TraceAction::allocate_failure, 0, impossible, 0});
    // Nothing to replay: size 0, a null free, a pointer tidepool never gave out.
    auto zero = allocator->allocate(0, 0, false);
    ASSERT_TRUE(zero.ok());
    EXPECT_EQ(zero.value(), 0u);
    EXPECT_TRUE(allocator->deallocate(0, 0, false).ok());
    EXPECT_FALSE(allocator->deallocate(0x1234, 0, false).ok());
    for (const auto& [address, size] : held) {
      ASSERT_TRUE(allocator->deallocate(address, 0, false).ok());
      expected.push_back({TraceAction::free, address, size, 0});
    }
    rt->finish();
  }

  const auto events = load(path);
  ASSERT_EQ(events.size(), expected.size());
  const std::uint64_t tid = current_thread_id();
  for (std::size_t i = 0; i < events.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i));
    EXPECT_EQ(events[i].action, expected[i].action);
    EXPECT_EQ(events[i].pointer, expected[i].pointer);
    EXPECT_EQ(events[i].size, expected[i].size);
    EXPECT_EQ(events[i].stream, expected[i].stream);
    EXPECT_EQ(events[i].thread, tid);
    if (i > 0) {
      EXPECT_GE(events[i].time_us, events[i - 1].time_us);
    }
    if (::testing::Test::HasFailure()) break;
  }

  Result result;
  std::string error;
  ASSERT_TRUE(run_replay("recorded_run.csv", events, "best_fit", {}, {}, &result, &error)) << error;
  EXPECT_EQ(result.events, expected.size());
  EXPECT_EQ(result.failed_allocations, 1u);
  EXPECT_EQ(result.peak_live_bytes, peak_live);
}

TEST(RecordedRun, ManyThreadsLoseNothingAndKeepEachThreadsOrder) {
  const std::string path = temp_path("recorded_threads.csv");
  constexpr int kThreads = 8;
  constexpr int kStepsPerThread = 12000;  // 96k events: the ring fills and wraps
  static_assert(kThreads * kStepsPerThread > static_cast<int>(runtime::TraceRecorder::kCapacity));
  std::vector<std::vector<Expected>> done(kThreads);
  std::vector<std::uint64_t> thread_ids(kThreads);
  {
    auto rt = traced_runtime(path);
    runtime::Allocator* allocator = rt->allocator(0);
    ASSERT_NE(allocator, nullptr);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        thread_ids[t] = current_thread_id();
        std::mt19937 rng(static_cast<unsigned>(100 + t));
        std::vector<std::pair<std::uintptr_t, std::size_t>> held;
        for (int i = 0; i < kStepsPerThread; ++i) {
          if (!held.empty() && (rng() % 2 == 0 || held.size() > 16)) {
            const std::size_t k = rng() % held.size();
            const auto [address, size] = held[k];
            held[k] = held.back();
            held.pop_back();
            if (!allocator->deallocate(address, 0, false).ok()) return;
            done[t].push_back({TraceAction::free, address, size, 0});
            continue;
          }
          const std::size_t size = 256 + rng() % (256 * 1024);
          auto r = allocator->allocate(size, 0, false);
          if (!r.ok()) return;
          done[t].push_back({TraceAction::allocate, r.value(), size, 0});
          held.emplace_back(r.value(), size);
        }
        for (const auto& [address, size] : held) {
          if (!allocator->deallocate(address, 0, false).ok()) return;
          done[t].push_back({TraceAction::free, address, size, 0});
        }
      });
    }
    for (auto& th : threads) th.join();
  }  // destroying the runtime flushes the trace

  std::size_t total = 0;
  std::map<std::uint64_t, int> thread_of;
  for (int t = 0; t < kThreads; ++t) {
    total += done[t].size();
    thread_of[thread_ids[t]] = t;
  }
  ASSERT_GE(total, static_cast<std::size_t>(kThreads * kStepsPerThread));
  const auto events = load(path);
  ASSERT_EQ(events.size(), total);
  std::vector<std::size_t> next(kThreads, 0);
  for (const TraceEvent& e : events) {
    auto it = thread_of.find(e.thread);
    ASSERT_NE(it, thread_of.end()) << "unknown thread " << e.thread;
    const int t = it->second;
    ASSERT_LT(next[t], done[t].size());
    const Expected& x = done[t][next[t]++];
    ASSERT_EQ(e.action, x.action) << "line " << e.line;
    ASSERT_EQ(e.pointer, x.pointer) << "line " << e.line;
    ASSERT_EQ(e.size, x.size) << "line " << e.line;
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(next[t], done[t].size());

  // Across threads the order is consistent too: every free follows its
  // allocation and no address is handed out twice, so the trace replays.
  Result result;
  std::string error;
  ASSERT_TRUE(run_replay("recorded_threads.csv", events, "best_fit", {}, {}, &result, &error)) << error;
  EXPECT_EQ(result.events, total);
  EXPECT_EQ(result.failed_allocations, 0u);
}

TEST(RecordedRun, FinishCompletesTheFileAndLaterEventsWriteThrough) {
  const std::string path = temp_path("recorded_finish.csv");
  auto rt = traced_runtime(path);
  runtime::Allocator* allocator = rt->allocator(0);
  ASSERT_NE(allocator, nullptr);
  auto a = allocator->allocate(MiB, 0, false);
  ASSERT_TRUE(a.ok());
  rt->finish();  // what the atexit handler does
  EXPECT_EQ(read_lines(path).size(), 2u);
  // A free during static destruction, after the exit handler ran.
  ASSERT_TRUE(allocator->deallocate(a.value(), 0, false).ok());
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[2].find(",free,"), std::string::npos) << lines[2];
}

TEST(RecordedRun, AnUnwritableTracePathIsOneLogLineAndAllocationGoesOn) {
  const std::string bad = "/nonexistent-dir/tidepool-trace.csv";
  ::testing::internal::CaptureStderr();
  auto rt = traced_runtime(bad);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rt->trace(), nullptr);
  std::size_t mentions = 0;
  std::size_t from = 0;
  while ((from = log.find(bad, from)) != std::string::npos) {
    ++mentions;
    from += bad.size();
  }
  EXPECT_EQ(mentions, 1u) << log;
  EXPECT_NE(log.find("cannot open the trace file"), std::string::npos) << log;
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;

  runtime::Allocator* allocator = rt->allocator(0);
  ASSERT_NE(allocator, nullptr);
  EXPECT_EQ(allocator->trace(), nullptr);
  auto r = allocator->allocate(3 * MiB, 0, false);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(allocator->deallocate(r.value(), 0, false).ok());
  rt->finish();
}

}  // namespace
}  // namespace tidepool::replay
