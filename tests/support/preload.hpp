// Test support: starting a child program with libtidepool.so preloaded.
//
// Under a sanitizer build, libtidepool.so needs the sanitizer's runtime, and
// it must come first: ASan insists on being the first library a process
// loads, and TSan's runtime finds the functions it intercepts with
// dlsym(RTLD_NEXT), which lands in libtidepool.so's dlsym and is answered
// relative to libtidepool.so: that is libc's definition only while TSan's
// runtime is loaded ahead of it, and TSan's own interceptor otherwise. A preloading test therefore puts the runtime
// this test process itself uses at the head of LD_PRELOAD; in the release
// build the prefix is empty.
#pragma once

#include <link.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace tidepool::testing {

// "PATH:" of the sanitizer runtime this process loaded, or "".
inline std::string sanitizer_preload_prefix() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        const char* name = info->dlpi_name;
        if (name != nullptr &&
            (std::strstr(name, "libasan.so") != nullptr || std::strstr(name, "libtsan.so") != nullptr)) {
          *static_cast<std::string*>(out) = std::string(name) + ":";
          return 1;
        }
        return 0;
      },
      &found);
  return found;
}

// Runs `command` through the shell, collecting its stdout. Returns the exit
// status, 128 + N for a death by signal N, or -1 when it could not start.
inline int run_command(const std::string& command, std::string* output) {
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) *output += buffer;
  const int status = ::pclose(pipe);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace tidepool::testing
