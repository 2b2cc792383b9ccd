// Loads and unloads a plugin that uses tidepool, again and again, as a host
// with plugins does. Each unload must give back everything tidepool held:
// the device memory of its pool (the sim's count of bytes in use returns to
// where it was), its threads and descriptors (at most one descriptor, the
// reload marker, stays), and the library itself. The trace, recorded across
// every load, must hold every cycle's events under one header.
// Usage: reload_probe PLUGIN CYCLES TRACE; exit status 42 when all held.
#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "sim/sim_control.h"

namespace {

// Descriptors open, less the sim's: the driver keeps released device
// memory for reuse, as a real driver keeps its own resources.
int open_descriptors() {
  int count = 0;
  if (DIR* fds = ::opendir("/proc/self/fd")) {
    while (const dirent* entry = ::readdir(fds)) {
      char link[256] = {};
      const std::string path = std::string("/proc/self/fd/") + entry->d_name;
      const ssize_t n = ::readlink(path.c_str(), link, sizeof(link) - 1);
      if (n > 0 && std::string(link).rfind("/memfd:tidepool-sim", 0) == 0) continue;
      ++count;
    }
    ::closedir(fds);
  }
  return count;
}

long threads() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stol(line.substr(8));
  }
  return -1;
}

long resident_kib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0;
  long resident = 0;
  statm >> pages >> resident;
  return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: reload_probe PLUGIN CYCLES TRACE\n");
    return 2;
  }
  const unsigned cycles = static_cast<unsigned>(std::atoi(argv[2]));
  const std::size_t device_before = tidepool_sim_device_bytes_in_use();
  const int fds_before = open_descriptors();
  const long threads_before = threads();
  long resident_after_first = 0;
  int failures = 0;
  for (unsigned cycle = 0; cycle < cycles; ++cycle) {
    void* plugin = ::dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (plugin == nullptr) {
      std::fprintf(stderr, "cycle %u: dlopen: %s\n", cycle, ::dlerror());
      return 1;
    }
    auto* work = reinterpret_cast<int (*)(unsigned)>(::dlsym(plugin, "plugin_cycle"));
    if (work == nullptr || work(cycle) != 0) {
      std::fprintf(stderr, "cycle %u: the plugin's work failed\n", cycle);
      ++failures;
    }
    ::dlclose(plugin);
    if (void* still = ::dlopen("libtidepool.so", RTLD_NOW | RTLD_NOLOAD)) {
      std::fprintf(stderr, "cycle %u: libtidepool.so is still loaded after dlclose\n", cycle);
      ::dlclose(still);
      ++failures;
    }
    if (tidepool_sim_device_bytes_in_use() != device_before) {
      std::fprintf(stderr, "cycle %u: %zu device bytes still held after unload\n", cycle,
                   tidepool_sim_device_bytes_in_use() - device_before);
      ++failures;
    }
    if (open_descriptors() > fds_before + 1 || threads() != threads_before) {
      std::fprintf(stderr, "cycle %u: %d descriptors (%d before), %ld threads (%ld before)\n", cycle,
                   open_descriptors(), fds_before, threads(), threads_before);
      ++failures;
    }
    if (cycle == 0) resident_after_first = resident_kib();
    if (failures > 0) break;
  }
  const long growth = resident_kib() - resident_after_first;
  const double per_cycle = cycles > 1 ? static_cast<double>(growth) / (cycles - 1) : 0.0;
  std::fprintf(stderr, "reload: %u cycles, resident growth after the first %ld KiB (%.1f KiB per cycle)\n", cycles,
               growth, per_cycle);
#ifndef __SANITIZE_ADDRESS__  // ASan's quarantine holds freed memory back on purpose
  // What stays per load: a semaphore and an exit-handler entry (tens of bytes).
  if (per_cycle > 64.0) {
    std::fprintf(stderr, "reload: the process grows by %.1f KiB per load\n", per_cycle);
    ++failures;
  }
#endif

  std::ifstream trace(argv[3]);
  std::string line;
  unsigned headers = 0;
  unsigned allocations = 0;
  while (std::getline(trace, line)) {
    if (line.rfind("Thread,", 0) == 0) ++headers;
    if (line.find(",allocate,") != std::string::npos) ++allocations;
  }
  if (headers != 1 || allocations != cycles * 6) {
    std::fprintf(stderr, "trace: %u headers, %u allocations (expected 1 and %u)\n", headers, allocations, cycles * 6);
    ++failures;
  }
  return failures == 0 ? 42 : 1;
}
