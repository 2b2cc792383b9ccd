// AllocationView: owners from the trace's Owner column (what each held at the
// live peak adds up to the peak), the bands chosen by bytes × time, and the
// rest summed at the sample times.
#include "allocation_view.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "trace_reader.hpp"

namespace tidepool::replay {
namespace {

std::vector<TraceEvent> read(const std::string& text, std::vector<std::string>* owners) {
  std::vector<TraceEvent> events;
  std::string error;
  EXPECT_TRUE(read_trace_buffer(text, "view.csv", &events, &error, nullptr, owners)) << error;
  return events;
}

TEST(AllocationView, OwnersHoldWhatTheyHeldAtTheLivePeak) {
  std::vector<std::string> owners;
  const auto events = read(
      "Thread,Time,Action,Pointer,Size,Stream,Owner\n"
      "1,00:00:00.000010,allocate,0x1000,400,0,libc10_cuda.so\n"
      "1,00:00:00.000020,allocate,0x2000,100,0,libcublasLt.so.12\n"
      "1,00:00:00.000030,allocate,0x3000,300,0,libc10_cuda.so\n"  // the peak: 800
      "1,00:00:00.000040,free,0x1000,400,0,\n"
      "1,00:00:00.000050,allocate,0x4000,600,0,libcublasLt.so.12\n"
      "1,00:00:00.000060,allocate failure,0x0,99999,0,libnccl.so.2\n"
      "1,00:00:00.000070,allocate,0x5000,50,0,\n",
      &owners);
  ASSERT_EQ(owners.size(), 4u);  // "", c10, cublasLt, nccl
  const AllocationView view = view_allocations(events, owners);
  // Live: 400, 500, 800, 400, 1000 (the peak), 1000, 1050 (the peak).
  EXPECT_EQ(view.peak_live_bytes, 1050u);
  EXPECT_EQ(view.peak_time_us, 70u);
  EXPECT_TRUE(view.named);
  EXPECT_EQ(view.allocations, 5u);
  const OwnerUsage& c10 = view.owners[1];
  const OwnerUsage& cublas = view.owners[2];
  EXPECT_EQ(c10.name, "libc10_cuda.so");
  EXPECT_EQ(c10.kind, "framework");
  EXPECT_EQ(c10.allocations, 2u);
  EXPECT_EQ(c10.requested_bytes, 700u);
  EXPECT_EQ(c10.peak_live_bytes, 700u);
  EXPECT_EQ(c10.live_at_peak_bytes, 300u);
  EXPECT_EQ(cublas.kind, "cuBLAS");
  EXPECT_EQ(cublas.live_at_peak_bytes, 700u);
  EXPECT_EQ(view.owners[0].live_at_peak_bytes, 50u);
  EXPECT_EQ(view.owners[3].allocations, 0u) << "a refused request holds nothing";
  std::uint64_t sum = 0;
  for (const OwnerUsage& o : view.owners) sum += o.live_at_peak_bytes;
  EXPECT_EQ(sum, view.peak_live_bytes);
}

TEST(AllocationView, BandsAreTheHeaviestAndTheRestIsSummedAtEachSample) {
  // One big long-lived allocation, one big short one, and many small ones.
  std::string text = "Thread,Time,Action,Pointer,Size,Stream\n";
  auto line = [&](int t, const char* action, std::uint64_t pointer, std::uint64_t size) {
    char buffer[128];
    std::snprintf(buffer, sizeof buffer, "1,00:00:00.%06d,%s,0x%llx,%llu,0\n", t, action,
                  static_cast<unsigned long long>(pointer), static_cast<unsigned long long>(size));
    text += buffer;
  };
  line(0, "allocate", 0x100000, 1000000);  // lives to the end, never freed
  for (int i = 0; i < 50; ++i) {
    line(10 + 10 * i, "allocate", 0x200000 + i * 0x100, 1000);
    line(15 + 10 * i, "free", 0x200000 + i * 0x100, 1000);
  }
  line(600, "allocate", 0x300000, 500000);
  line(700, "free", 0x300000, 500000);
  line(1000, "allocate", 0x400000, 10);
  std::vector<std::string> owners;
  const auto events = read(text, &owners);
  const AllocationView view = view_allocations(events, owners, /*max_bands=*/2, /*points=*/101);
  EXPECT_FALSE(view.named);
  EXPECT_EQ(view.allocations, 53u);
  ASSERT_EQ(view.bands.size(), 2u);
  EXPECT_EQ(view.left_out, 51u);
  // In allocation order.
  EXPECT_EQ(view.bands[0].size, 1000000u);
  EXPECT_FALSE(view.bands[0].freed);
  EXPECT_EQ(view.bands[0].end_us, 1000u);
  EXPECT_EQ(view.bands[1].size, 500000u);
  EXPECT_TRUE(view.bands[1].freed);
  EXPECT_EQ(view.bands[1].begin_us, 600u);
  EXPECT_EQ(view.bands[1].end_us, 700u);
  // Samples every 10 µs: each small allocation lives at the sample where it
  // begins (10, 20, ...) and is freed before the next; the last one lives on.
  ASSERT_EQ(view.times.size(), 101u);  // the peak (at 600) is a sample already
  ASSERT_EQ(view.rest.size(), view.times.size());
  EXPECT_EQ(view.rest[0], 0u);
  EXPECT_EQ(view.rest[1], 1000u);
  EXPECT_EQ(view.rest[50], 1000u);
  EXPECT_EQ(view.rest[51], 0u);
  EXPECT_EQ(view.rest[100], 10u);
  EXPECT_EQ(view.peak_time_us, 600u);
}

TEST(AllocationView, ThePeakIsASampleAndFreesOfUnknownPointersAreIgnored) {
  std::vector<std::string> owners;
  const auto events = read(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,00:00:00.000000,free,0x9999,64,0\n"
      "1,00:00:00.000000,allocate,0x1000,100,0\n"
      "1,00:00:00.000333,allocate,0x2000,100,0\n"
      "1,00:00:00.000334,free,0x2000,100,0\n"
      "1,00:00:01.000000,free,0x1000,100,0\n",
      &owners);
  const AllocationView view = view_allocations(events, owners, 400, 4);
  EXPECT_EQ(view.peak_live_bytes, 200u);
  EXPECT_EQ(view.peak_time_us, 333u);
  EXPECT_NE(std::find(view.times.begin(), view.times.end(), 333u), view.times.end());
  // Four evenly spaced, the peak, and where the short band ends.
  EXPECT_EQ(view.times, (std::vector<std::uint64_t>{0, 333, 334, 333333, 666666, 1000000}));
}

TEST(AllocationView, ClocksOutOfOrderAndTracesWithoutAllocationsDrawNothingWrong) {
  std::vector<std::string> owners;
  // The second thread's free is logged a microsecond before the allocation
  // it frees, and the last allocation's time is earlier than the one before.
  const auto skewed = read(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,00:00:00.000100,allocate,0x1000,100,0\n"
      "2,00:00:00.000199,free,0x2000,50,0\n"
      "1,00:00:00.000200,allocate,0x2000,50,0\n"
      "1,00:00:00.000300,allocate,0x3000,70,0\n"
      "1,00:00:00.000250,allocate,0x4000,30,0\n",
      &owners);
  const AllocationView view = view_allocations(skewed, owners, 2, 11);
  EXPECT_EQ(view.times.front(), 100u);
  EXPECT_EQ(view.times.back(), 300u);
  for (const Band& b : view.bands) EXPECT_LE(b.begin_us, b.end_us);
  for (const std::uint64_t r : view.rest) EXPECT_LE(r, 250u) << "the rest never wraps below zero";
  EXPECT_EQ(view.allocations, 4u);

  const auto frees_only =
      read("Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.000100,free,0x1000,100,0\n", &owners);
  const AllocationView none = view_allocations(frees_only, owners);
  EXPECT_EQ(none.allocations, 0u);
  EXPECT_TRUE(none.times.empty()) << "nothing to draw";
  EXPECT_TRUE(none.bands.empty());
}

}  // namespace
}  // namespace tidepool::replay
