// Children of the live benchmarks: each run of bench_live_replay and
// bench_residency_live re-executes the program under
// LD_PRELOAD=libtidepool.so with the sim as libcuda.so.1, the path a user's
// program takes, and reads what the child prints. Needs TIDEPOOL_LIBRARY and
// TIDEPOOL_SIM_DIR defined by the build.
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX declares it nowhere

namespace tidepool::bench {

inline std::string self_path() {
  char buffer[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  if (n <= 0) return {};
  buffer[n] = '\0';
  return buffer;
}

// The environment a child runs in: ours, with the preload, the sim as
// libcuda.so.1 and room for any workload, and `marker`=1 (a process that has
// it is a preloaded child). A TIDEPOOL_CONF the user set is kept unless
// `set` ("NAME=value" entries) names it: those replace ours.
inline std::vector<std::string> child_environment(const char* marker, const std::vector<std::string>& set = {}) {
  const auto prefixed = [](const char* name, const std::string& first) {
    const char* old = std::getenv(name);
    return std::string(name) + "=" + first + (old != nullptr && *old != '\0' ? ":" + std::string(old) : "");
  };
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    // The preload must open the very sim this program linked, so no other driver path.
    if (name == "LD_PRELOAD" || name == "LD_LIBRARY_PATH" || name == "TIDEPOOL_SIM_MEMORY" ||
        name == "TIDEPOOL_CUDA_LIB" || name == marker) {
      continue;
    }
    bool replaced = false;
    for (const std::string& v : set) replaced = replaced || v.substr(0, v.find('=')) == name;
    if (replaced) continue;
    env.push_back(entry);
  }
  env.push_back(prefixed("LD_PRELOAD", TIDEPOOL_LIBRARY));
  env.push_back(prefixed("LD_LIBRARY_PATH", TIDEPOOL_SIM_DIR));
  env.emplace_back("TIDEPOOL_SIM_MEMORY=80GiB");  // the sim commits nothing until touched
  env.push_back(std::string(marker) + "=1");
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

// Runs the child, collecting its stdout (stderr passes through). Returns its
// exit status, 128 + N for a death by signal N, -1 when it could not start.
inline int run_child(const std::vector<std::string>& args, const char* marker, std::string* out,
                     const std::vector<std::string>& set = {}) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::vector<std::string> env = child_environment(marker, set);
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    return -1;
  }
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::read(pipe_fds[0], buffer, sizeof buffer)) != 0) {
    if (n > 0) out->append(buffer, static_cast<std::size_t>(n));
    if (n < 0 && errno != EINTR) break;
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace tidepool::bench
