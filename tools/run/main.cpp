// tidepool-run [--conf STR] [--lib PATH] -- CMD ARGS...
//
// Sets LD_PRELOAD to include libtidepool.so and TIDEPOOL_CONF, then execs the
// program. Entries already in LD_PRELOAD stay first: some must lead (the
// sanitizer runtimes insist on it), and every preload precedes the program's
// own libcuda and libcudart anyway, which is all the hooks need.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/config.hpp"

namespace {

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: tidepool-run [--conf STR] [--lib PATH] -- CMD [ARGS...]\n"
               "Runs CMD with libtidepool.so preloaded, so that its device allocations come from tidepool.\n\n"
               "  --conf STR   TIDEPOOL_CONF for the program (default: the current environment's)\n"
               "  --lib PATH   the libtidepool.so to preload (default: the one installed beside this tool)\n\n%s",
               tidepool::runtime::options_help().c_str());
}

std::string default_library() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const char* lib : {"lib", "lib64"}) {
      const auto candidate = exe.parent_path().parent_path() / lib / "libtidepool.so";
      if (std::filesystem::exists(candidate, ec)) return candidate.string();
    }
  }
  return TIDEPOOL_BUILD_LIBRARY;
}

}  // namespace

int main(int argc, char** argv) {
  std::string conf;
  bool have_conf = false;
  std::string library = default_library();
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    }
    if ((arg == "--conf" || arg == "--lib") && i + 1 < argc) {
      (arg == "--conf" ? conf : library) = argv[++i];
      have_conf = have_conf || arg == "--conf";
      continue;
    }
    std::fprintf(stderr, "tidepool-run: unexpected argument \"%s\"\n", arg.c_str());
    usage(stderr);
    return 2;
  }
  if (i >= argc) {
    std::fprintf(stderr, "tidepool-run: no program given\n");
    usage(stderr);
    return 2;
  }
  if (have_conf) {
    const auto parsed = tidepool::runtime::parse_config(conf);
    if (parsed.passthrough) std::fprintf(stderr, "%s\n", parsed.error.c_str());  // the program still runs
    setenv("TIDEPOOL_CONF", conf.c_str(), 1);
  }
  std::string preload;
  if (const char* existing = std::getenv("LD_PRELOAD"); existing != nullptr && *existing != '\0') {
    preload = std::string(existing) + ":";
  }
  preload += library;
  setenv("LD_PRELOAD", preload.c_str(), 1);
  execvp(argv[i], argv + i);
  std::fprintf(stderr, "tidepool-run: cannot run \"%s\": %s\n", argv[i], std::strerror(errno));
  return 127;
}
