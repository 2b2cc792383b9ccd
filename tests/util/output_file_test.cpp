// Specification of how tidepool opens the files it writes: never through a
// link, only regular files, never blocking on a FIFO, never making a directory.
#include "util/output_file.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace tidepool::util {
namespace {

namespace fs = std::filesystem;

class OutputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "tidepool-output-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  [[nodiscard]] std::string path(const char* name) const { return (dir_ / name).string(); }
  static std::string contents(const std::string& file) {
    std::ifstream in(file);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static void write(const std::string& file, const std::string& text) { std::ofstream(file) << text; }

  fs::path dir_;
};

TEST_F(OutputFile, TruncatesOrAppendsARegularFile) {
  write(path("out"), "old contents");
  auto truncated = open_output_file(path("out"), OutputMode::truncate);
  ASSERT_TRUE(truncated) << truncated.status().message();
  ASSERT_EQ(::write(truncated.value(), "new", 3), 3);
  // Writes block as usual once open: the non-blocking open is for FIFOs only.
  EXPECT_EQ(::fcntl(truncated.value(), F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(::fcntl(truncated.value(), F_GETFD) & FD_CLOEXEC, 0);
  ::close(truncated.value());
  EXPECT_EQ(contents(path("out")), "new");

  auto appended = open_output_file(path("out"), OutputMode::append);
  ASSERT_TRUE(appended);
  ASSERT_EQ(::write(appended.value(), "+", 1), 1);
  ::close(appended.value());
  EXPECT_EQ(contents(path("out")), "new+");

  auto created = open_output_file(path("fresh"), OutputMode::truncate);
  ASSERT_TRUE(created);
  ::close(created.value());
  EXPECT_TRUE(fs::is_regular_file(path("fresh")));
}

TEST_F(OutputFile, NeverWritesThroughASymbolicLink) {
  write(path("victim"), "precious");
  fs::create_symlink(path("victim"), path("link"));
  for (OutputMode mode : {OutputMode::truncate, OutputMode::append}) {
    auto opened = open_output_file(path("link"), mode);
    ASSERT_FALSE(opened);
    EXPECT_NE(std::string(opened.status().message()).find("symbolic link"), std::string::npos);
  }
  // A dangling link is not followed to create its target either.
  fs::create_symlink(path("nowhere"), path("dangling"));
  EXPECT_FALSE(open_output_file(path("dangling"), OutputMode::truncate));
  EXPECT_FALSE(fs::exists(path("nowhere")));
  EXPECT_EQ(contents(path("victim")), "precious");
}

TEST_F(OutputFile, RefusesAFifoWithOrWithoutAReaderWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  auto alone = open_output_file(path("fifo"), OutputMode::truncate);  // would block forever if opened blocking
  ASSERT_FALSE(alone);
  EXPECT_NE(std::string(alone.status().message()).find("FIFO"), std::string::npos) << alone.status().message();
  const int reader = ::open(path("fifo").c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  auto read = open_output_file(path("fifo"), OutputMode::append);
  EXPECT_FALSE(read);
  char byte = 0;
  EXPECT_LE(::read(reader, &byte, 1), 0);  // nothing was written into it
  ::close(reader);
}

TEST_F(OutputFile, RefusesDevicesAndDirectories) {
  auto device = open_output_file("/dev/null", OutputMode::truncate);
  ASSERT_FALSE(device);
  EXPECT_NE(std::string(device.status().message()).find("device"), std::string::npos);
  fs::create_directory(path("dir"));
  auto directory = open_output_file(path("dir"), OutputMode::append);
  ASSERT_FALSE(directory);
  EXPECT_NE(std::string(directory.status().message()).find("directory"), std::string::npos);
}

TEST_F(OutputFile, NeverCreatesADirectory) {
  auto opened = open_output_file(path("missing/sub/out.log"), OutputMode::append);
  ASSERT_FALSE(opened);
  EXPECT_NE(std::string(opened.status().message()).find("does not exist"), std::string::npos);
  EXPECT_FALSE(fs::exists(path("missing")));
  EXPECT_FALSE(replace_file(path("missing/report.json"), "{}"));
  EXPECT_FALSE(fs::exists(path("missing")));
}

TEST_F(OutputFile, ReplaceWritesTheWholeFileAndLeavesNoTemporary) {
  write(path("report.json"), "old");
  ASSERT_TRUE(replace_file(path("report.json"), "{\"new\": true}\n"));
  EXPECT_EQ(contents(path("report.json")), "{\"new\": true}\n");
  struct stat info {};
  ASSERT_EQ(::stat(path("report.json").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0644u);
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1u);
}

TEST_F(OutputFile, ReplaceNeitherFollowsNorReplacesWhatIsNotARegularFile) {
  write(path("victim"), "precious");
  fs::create_symlink(path("victim"), path("report.json"));
  // The old scheme's fixed temporary name, planted as a link: irrelevant now.
  fs::create_symlink(path("victim"), path("report.json.tmp"));
  auto through_link = replace_file(path("report.json"), "{}");
  ASSERT_FALSE(through_link);
  EXPECT_NE(std::string(through_link.message()).find("symbolic link"), std::string::npos);
  EXPECT_TRUE(fs::is_symlink(path("report.json")));
  EXPECT_EQ(contents(path("victim")), "precious");

  ASSERT_EQ(::mkfifo(path("pipe.json").c_str(), 0600), 0);
  EXPECT_FALSE(replace_file(path("pipe.json"), "{}"));
  EXPECT_TRUE(fs::is_fifo(path("pipe.json")));  // not renamed over
  fs::create_directory(path("dir.json"));
  EXPECT_FALSE(replace_file(path("dir.json"), "{}"));
  EXPECT_TRUE(fs::is_directory(path("dir.json")));
  // No temporaries are left behind by the refusals.
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 5u);
}

}  // namespace
}  // namespace tidepool::util
