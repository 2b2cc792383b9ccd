// Specification of the RMM CSV trace format: parsing, formatting, gzip, and
// every bad-input case with its line number.
#include "runtime/trace_format.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>

#include "replay.hpp"
#include "synthetic_trace.hpp"
#include "trace_reader.hpp"

namespace tidepool::replay {
namespace {

using testing::kTraceHeader;

// Named per process: two test runs on one machine must not share a file.
std::string temp_path(const std::string& name) {
  return std::string(::testing::TempDir()) + "/tidepool_" + std::to_string(::getpid()) + "_" + name;
}

std::string write_text(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

std::string reader_error(const std::string& text) {
  const std::string path = write_text("bad.csv", text);
  auto reader = TraceReader::open(path);
  if (!reader) return reader.status().message();
  TraceEvent e;
  while (reader.value()->next(&e)) {
  }
  return reader.value()->error();
}

// The counts are the ones data/traces/README.md gives; the lines are counted
// independently of the reader, through zlib.
TEST(TraceFormat, EveryLineOfTheSampleTracesParses) {
  const std::pair<const char*, std::size_t> traces[] = {
      {"resnet50_b16.csv.gz", 77496}, {"mobilenet_v2_b32.csv.gz", 77050}, {"seq2seq_b32.csv.gz", 34692}};
  for (const auto& [name, expected] : traces) {
    const std::string path = std::string(TIDEPOOL_TRACES_DIR) + "/" + name;
    auto reader = TraceReader::open(path);
    ASSERT_TRUE(reader.ok()) << path;
    std::size_t events = 0;
    TraceEvent e;
    while (reader.value()->next(&e)) ++events;
    EXPECT_FALSE(reader.value()->failed()) << reader.value()->error();
    gzFile in = gzopen(path.c_str(), "rb");
    ASSERT_NE(in, nullptr) << path;
    std::size_t lines = 0;
    char buffer[4096];
    while (gzgets(in, buffer, sizeof buffer) != nullptr) lines += std::string_view(buffer).ends_with('\n') ? 1 : 0;
    gzclose(in);
    EXPECT_EQ(events, lines - 1) << name;
    EXPECT_EQ(events, expected) << name;
  }
}

TEST(TraceFormat, ParsesTimesPointersAndActions) {
  TraceEvent e;
  ASSERT_TRUE(runtime::parse_trace_line("3,01:02:03:000042,allocate failure,0x7f00aa,4096,0x1", &e, nullptr).ok());
  EXPECT_EQ(e.thread, 3u);
  EXPECT_EQ(e.time_us, ((1u * 60 + 2) * 60 + 3) * 1000000ull + 42);
  EXPECT_EQ(e.action, TraceAction::allocate_failure);
  EXPECT_EQ(e.pointer, 0x7f00aau);
  EXPECT_EQ(e.size, 4096u);
  EXPECT_EQ(e.stream, 1u);
  // RMM's own logs write a '.' before the fraction.
  ASSERT_TRUE(runtime::parse_trace_line("0,00:00:01.5,free,7f00aa,0,0", &e, nullptr).ok());
  EXPECT_EQ(e.time_us, 1500000u);
  EXPECT_EQ(e.action, TraceAction::free);
}

TEST(TraceFormat, WrittenLinesParseBackIdentically) {
  TraceEvent original{7, 3723000123ull, TraceAction::allocate, 0xdeadbeef000ull, 12345, 42, 0};
  char buffer[runtime::kMaxTraceLineBytes];
  const std::size_t n = runtime::format_trace_line(original, "libcublasLt.so.12", buffer, sizeof buffer);
  ASSERT_GT(n, 0u);
  EXPECT_EQ(buffer[n - 1], '\n');
  TraceEvent parsed;
  std::string_view owner;
  ASSERT_TRUE(runtime::parse_trace_line(std::string_view(buffer, n - 1), &parsed, nullptr, &owner).ok());
  EXPECT_EQ(owner, "libcublasLt.so.12");
  EXPECT_EQ(parsed.thread, original.thread);
  EXPECT_EQ(parsed.time_us, original.time_us);
  EXPECT_EQ(parsed.action, original.action);
  EXPECT_EQ(parsed.pointer, original.pointer);
  EXPECT_EQ(parsed.size, original.size);
  EXPECT_EQ(parsed.stream, original.stream);
  EXPECT_EQ(runtime::format_trace_line(original, "", buffer, 10), 0u);  // too small: nothing, not a crash
}

TEST(TraceFormat, OwnerIsAnOptionalSeventhColumn) {
  TraceEvent e;
  std::string_view owner = "stale";
  ASSERT_TRUE(runtime::parse_trace_line("1,00:00:01.000001,allocate,0x10,64,0", &e, nullptr, &owner).ok());
  EXPECT_TRUE(owner.empty()) << "RMM's six columns: no owner";
  ASSERT_TRUE(runtime::parse_trace_line("1,00:00:01.000001,allocate,0x10,64,0,libnccl.so.2", &e, nullptr, &owner).ok());
  EXPECT_EQ(owner, "libnccl.so.2");
  ASSERT_TRUE(runtime::parse_trace_line("1,00:00:01.000001,free,0x10,64,0,", &e, nullptr, &owner).ok());
  EXPECT_TRUE(owner.empty());
  std::string detail;
  EXPECT_FALSE(runtime::parse_trace_line("1,00:00:01.000001,free,0x10,64,0,a,b", &e, &detail, &owner).ok());
  EXPECT_NE(detail.find("expected 7 comma-separated columns"), std::string::npos) << detail;
  EXPECT_NE(detail.find("found more"), std::string::npos) << detail;
  EXPECT_FALSE(runtime::parse_trace_line("1,00:00:01.000001,free,0x10,64", &e, &detail, &owner).ok());
  EXPECT_NE(detail.find("found 5"), std::string::npos) << detail;
  // Under RMM's header (no `owner` asked for), a seventh column is one too many.
  EXPECT_FALSE(runtime::parse_trace_line("1,00:00:01.000001,free,0x10,64,0,x", &e, &detail).ok());
  EXPECT_NE(detail.find("expected 6 comma-separated columns"), std::string::npos) << detail;
  // What a library's name may not bring into a CSV field.
  EXPECT_EQ(runtime::owner_text("lib,x\"y\n.so"), "lib_x_y_.so");
  EXPECT_EQ(runtime::owner_text(std::string(100, 'a')).size(), runtime::kMaxOwnerBytes);
}

TEST(TraceFormat, ReadsGzipCompressedTraces) {
  const std::string path = temp_path("trace.csv.gz");
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  const std::string text =
      std::string(kTraceHeader) + "0,00:00:00:000001,allocate,0x10,64,0\n0,00:00:00:000002,free,0x10,64,0\n";
  gzwrite(gz, text.data(), static_cast<unsigned>(text.size()));
  gzclose(gz);
  std::vector<TraceEvent> events;
  std::string error;
  ASSERT_TRUE(load_trace(path, &events, &error)) << error;
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].action, TraceAction::free);
  EXPECT_EQ(events[1].line, 3u);
}

TEST(TraceFormat, BadInputNamesTheLine) {
  const std::string ok = "0,00:00:00:000001,allocate,0x10,64,0\n";
  EXPECT_NE(reader_error(std::string(kTraceHeader) + ok + "0,00:00:00:000002,frobnicate,0x10,64,0\n")
                .find(":3: unknown action"),
            std::string::npos);
  EXPECT_NE(reader_error(std::string(kTraceHeader) + "0,00:00:00:000002,allocate,0xZZ,64,0\n").find(":2: bad pointer"),
            std::string::npos);
  EXPECT_NE(
      reader_error(std::string(kTraceHeader) + ok + ok + "0,00:00:00:000002,allocate,0x20,-5,0\n").find(":4: bad size"),
      std::string::npos);
  EXPECT_NE(reader_error(std::string(kTraceHeader) + "0,00:00:00:000002,allocate,0x20,5\n").find(":2: expected 6"),
            std::string::npos);
  EXPECT_NE(reader_error(std::string(kTraceHeader) + "0,yesterday,allocate,0x20,5,0\n").find(":2: bad time"),
            std::string::npos);
  EXPECT_NE(reader_error(ok).find("header"), std::string::npos);
  EXPECT_NE(reader_error("").find("empty"), std::string::npos);
}

}  // namespace
}  // namespace tidepool::replay
