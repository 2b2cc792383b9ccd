// tidepool-run [options] [--] CMD ARGS...
//
// Sets LD_PRELOAD to include libtidepool.so and TIDEPOOL_CONF, then execs the
// program. Entries already in LD_PRELOAD stay first: some must lead (the
// sanitizer runtimes insist on it), and every preload precedes the program's
// own libcuda and libcudart anyway, which is all the hooks need.
//
// Options end at the first word that is not one of ours, so `--` is optional
// and the program's own flags are never read as ours. A configuration that
// does not parse stops here with exit status 2: under the preload it would
// only turn tidepool off, and a user who asked for tidepool wants to know.
// --sim runs the program on the simulated driver (driver-API programs only;
// a program on the real cudart needs a real driver, see docs/configuration.md).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "runtime/runtime.hpp"
#include "util/util.hpp"

namespace {

void prepend_path(const char* variable, const std::string& entry) {
  std::string value = entry;
  if (const char* existing = std::getenv(variable); existing != nullptr && *existing != '\0') {
    value += ":" + std::string(existing);
  }
  setenv(variable, value.c_str(), 1);
}

// The usage line with the program's place in it: CLI11's own knows only
// our options.
class Usage : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* /*app*/, std::string name) const override {
    return "Usage: " + name + " [OPTIONS] [--] CMD [ARGS...]\n";
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs CMD with libtidepool.so preloaded, so that its device allocations come from tidepool.",
               "tidepool-run"};
  app.formatter(std::make_shared<Usage>());
  std::string conf;
  std::string library = tidepool::util::installed_or_built("libtidepool.so", TIDEPOOL_BUILD_LIBRARY);
  std::string sim_library = tidepool::util::installed_or_built("tidepool/sim/libcuda.so.1", TIDEPOOL_BUILD_SIM_LIBRARY);
  bool sim = false;
  std::vector<std::string> command;
  app.set_version_flag("--version", std::string("tidepool-run ") + tidepool::util::version());
  auto* conf_option =
      app.add_option("--conf", conf, "TIDEPOOL_CONF for the program (default: the current environment's)");
  app.add_option("--lib", library, "The libtidepool.so to preload (default: the one installed beside this tool)");
  app.add_flag("--sim", sim,
               "Run on tidepool's simulated driver (driver-API programs only: the real cudart needs a real driver)");
  // Everything from the first word that is not an option of ours belongs to
  // the program, unparsed.
  app.prefix_command();
  app.footer(tidepool::runtime::options_help());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "tidepool-run: %s\nRun tidepool-run --help for the options.\n", e.what());
    return 2;
  }
  command = app.remaining();
  const bool separated = !command.empty() && command.front() == "--";
  if (separated) command.erase(command.begin());
  if (!separated && !command.empty() && command.front().starts_with("-")) {
    std::fprintf(stderr, "tidepool-run: unknown option \"%s\"\nRun tidepool-run --help for the options.\n",
                 command.front().c_str());
    return 2;
  }
  if (command.empty()) {
    std::fprintf(stderr, "tidepool-run: no program given\nRun tidepool-run --help for the options.\n");
    return 2;
  }

  if (conf_option->count() > 0) {
    setenv("TIDEPOOL_CONF", conf.c_str(), 1);
  } else if (const char* inherited = std::getenv("TIDEPOOL_CONF"); inherited != nullptr) {
    conf = inherited;
  }
  const auto parsed = tidepool::runtime::parse_config(conf);
  if (parsed.passthrough) {
    std::fprintf(stderr, "%s\ntidepool-run: not running %s with a configuration tidepool would refuse\n",
                 parsed.error.c_str(), command.front().c_str());
    return 2;
  }
  if (sim) {
    std::error_code ec;
    if (!std::filesystem::exists(sim_library, ec)) {
      std::fprintf(stderr, "tidepool-run: --sim: the simulated driver is not at %s\n", sim_library.c_str());
      return 2;
    }
    // The program's own libcuda.so.1 and tidepool's both resolve to the sim.
    setenv("TIDEPOOL_CUDA_LIB", sim_library.c_str(), 1);
    prepend_path("LD_LIBRARY_PATH", std::filesystem::path(sim_library).parent_path().string());
  }
  std::string preload;
  if (const char* existing = std::getenv("LD_PRELOAD"); existing != nullptr && *existing != '\0') {
    preload = std::string(existing) + ":";
  }
  preload += library;
  setenv("LD_PRELOAD", preload.c_str(), 1);

  std::vector<char*> args;
  args.reserve(command.size() + 1);
  for (std::string& word : command) args.push_back(word.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  // As bash answers: 127 when there is no such program (a path that does
  // not exist, a name not on PATH), 126 when it is there but cannot be run
  // (not executable, not a program, a path through a file).
  const int error = errno;
  std::fprintf(stderr, "tidepool-run: cannot run \"%s\": %s\n", args[0], std::strerror(error));
  const bool searched = std::strchr(args[0], '/') == nullptr;
  return error == ENOENT || (error == ENOTDIR && searched) ? 127 : 126;
}
