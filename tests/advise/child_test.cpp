// One trial's process: exit codes, output tails, step markers timed as they
// arrive, the timeout, and nothing left running afterwards.
#include "child.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace tidepool::advise {
namespace {

ChildSpec shell(const std::string& script, double timeout_s = 30) {
  ChildSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  for (char** e = environ; *e != nullptr; ++e) spec.environment.emplace_back(*e);
  spec.timeout_s = timeout_s;
  return spec;
}

TEST(AdviseChild, ReportsTheExitCodeAndTheTailsOfBothStreams) {
  const auto r = run_child(shell("echo out; echo err 1>&2; exit 3"));
  ASSERT_TRUE(r.started);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.signal, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.stdout_tail, "out\n");
  EXPECT_EQ(r.stderr_tail, "err\n");
}

TEST(AdviseChild, AProgramThatCannotRunIsNotStarted) {
  ChildSpec spec = shell("");
  spec.argv = {"/no/such/program"};
  const auto r = run_child(spec);
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.start_error.find("/no/such/program"), std::string::npos);
}

TEST(AdviseChild, KeepsOnlyTheTailOfALongOutput) {
  const auto r = run_child(shell("i=0; while [ $i -lt 3000 ]; do echo line $i; i=$((i+1)); done 1>&2"));
  EXPECT_LE(r.stderr_tail.size(), kTailBytes);
  EXPECT_NE(r.stderr_tail.find("line 2999\n"), std::string::npos);
  EXPECT_EQ(last_lines(r.stderr_tail, 2), "line 2998\nline 2999");
}

TEST(AdviseChild, TimesMarkerLinesAsTheyArrive) {
  ChildSpec spec = shell("for i in 1 2 3 4; do echo \"step $i\"; echo noise; sleep 0.2; done");
  spec.step_marker.emplace("^step [0-9]+$");
  const auto r = run_child(spec);
  ASSERT_EQ(r.marker_s.size(), 4u);
  for (std::size_t i = 1; i < r.marker_s.size(); ++i) {
    EXPECT_GT(r.marker_s[i] - r.marker_s[i - 1], 0.15);
  }
}

TEST(AdviseChild, TheTimeoutKillsTheWholeGroupAndLeavesNothingRunning) {
  const std::string pid_file = ::testing::TempDir() + "/advise_child_grandchild.pid";
  ::unlink(pid_file.c_str());
  // A grandchild that ignores SIGTERM and would outlive its parent.
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_child(shell("sh -c 'trap \"\" TERM; echo $$ > " + pid_file + "; exec sleep 60' & sleep 60", 1));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(took, 10);
  std::ifstream in(pid_file);
  pid_t grandchild = 0;
  ASSERT_TRUE(in >> grandchild);
  // Reaped by init once killed: give it a moment, then it must be gone.
  for (int i = 0; i < 100 && ::kill(grandchild, 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_NE(::kill(grandchild, 0), 0) << "pid " << grandchild << " still runs";
}

TEST(AdviseChild, AProgramThatExitsLeavingAChildBehindDoesNotHangTheTrial) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_child(shell("sleep 60 & echo started; exit 0", 30));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_LT(took, 5);
}

}  // namespace
}  // namespace tidepool::advise
