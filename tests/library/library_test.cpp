// Properties of the built libtidepool.so and of tidepool-run: what it needs at
// run time, what it exports, and how it starts a program. The ELF dynamic
// section and symbol table are read directly, with no binutils needed.
#include <elf.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/preload.hpp"

namespace {

struct DynamicInfo {
  std::vector<std::string> needed;
  std::vector<std::string> exported;  // defined, global or weak, default visibility
  std::vector<std::string> imported;  // undefined: resolved from other objects
};

DynamicInfo read_dynamic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DynamicInfo info;
  if (bytes.size() < sizeof(Elf64_Ehdr)) return info;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(bytes.data());
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(bytes.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    const Elf64_Shdr& s = sections[i];
    const char* strings = bytes.data() + sections[s.sh_link].sh_offset;
    if (s.sh_type == SHT_DYNAMIC) {
      const auto* dyn = reinterpret_cast<const Elf64_Dyn*>(bytes.data() + s.sh_offset);
      for (std::size_t k = 0; k < s.sh_size / sizeof(Elf64_Dyn) && dyn[k].d_tag != DT_NULL; ++k) {
        if (dyn[k].d_tag == DT_NEEDED) info.needed.emplace_back(strings + dyn[k].d_un.d_val);
      }
    }
    if (s.sh_type == SHT_DYNSYM) {
      const auto* syms = reinterpret_cast<const Elf64_Sym*>(bytes.data() + s.sh_offset);
      for (std::size_t k = 1; k < s.sh_size / sizeof(Elf64_Sym); ++k) {
        const Elf64_Sym& sym = syms[k];
        const int bind = ELF64_ST_BIND(sym.st_info);
        if (sym.st_shndx == SHN_UNDEF && sym.st_name != 0) info.imported.emplace_back(strings + sym.st_name);
        if (sym.st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK)) continue;
        info.exported.emplace_back(strings + sym.st_name);
      }
    }
  }
  return info;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

TEST(Library, NeedsOnlyTheCAndCxxRuntimes) {
  const DynamicInfo info = read_dynamic(TIDEPOOL_LIBRARY);
  ASSERT_FALSE(info.needed.empty());
  for (const std::string& lib : info.needed) {
    EXPECT_FALSE(starts_with(lib, "libcuda")) << lib;
    const bool allowed = starts_with(lib, "libc.so") || starts_with(lib, "libm.so") ||
                         starts_with(lib, "libstdc++.so") || starts_with(lib, "libgcc_s.so") ||
                         starts_with(lib, "libdl.so") || starts_with(lib, "libpthread.so") ||
                         starts_with(lib, "librt.so") || starts_with(lib, "ld-linux") ||
                         // The sanitizer build links its runtimes; the release library never does.
                         starts_with(lib, "libasan.so") || starts_with(lib, "libubsan.so");
    EXPECT_TRUE(allowed) << "unexpected run-time dependency " << lib;
  }
}

TEST(Library, ExportsOnlyTidepoolAndTheHookedCudaSymbols) {
  const DynamicInfo info = read_dynamic(TIDEPOOL_LIBRARY);
  bool has_api = false;
  for (const std::string& name : info.exported) {
    has_api = has_api || name == "tidepool_malloc";
    const bool allowed = starts_with(name, "tidepool_") || starts_with(name, "cu") || name == "dlsym" ||
                         starts_with(name, "__asan") || starts_with(name, "__ubsan") ||
                         starts_with(name, "__sanitizer");
    EXPECT_TRUE(allowed) << "unexpected export " << name;
    EXPECT_EQ(name.find("fmt"), std::string::npos) << name;
    EXPECT_EQ(name.find("spdlog"), std::string::npos) << name;
    EXPECT_FALSE(starts_with(name, "_ZN")) << "a C++ symbol leaks: " << name;
  }
  EXPECT_TRUE(has_api);
}

using tidepool::testing::run_command;
using tidepool::testing::sanitizer_preload_prefix;

// In a setuid or setgid program the environment belongs to whoever started
// it: tidepool must not let it choose files to write or a library to load.
TEST(Library, ReadsTheEnvironmentOnlyThroughSecureGetenv) {
  const DynamicInfo info = read_dynamic(TIDEPOOL_LIBRARY);
  bool secure = false;
  for (const std::string& name : info.imported) {
    EXPECT_NE(name, "getenv") << "libtidepool.so reads the environment with plain getenv";
    secure = secure || name == "secure_getenv";
  }
  EXPECT_TRUE(secure);
}

TEST(TidepoolRun, SetsThePreloadAndConfAndKeepsTheExitStatus) {
  std::string out;
  const int rc =
      run_command("LD_PRELOAD=" + sanitizer_preload_prefix() + " " + TIDEPOOL_RUN +
                      " --conf policy:first_fit -- /bin/sh -c 'echo \"$LD_PRELOAD|$TIDEPOOL_CONF|$1\"; exit 7' sh arg1",
                  &out);
  EXPECT_EQ(rc, 7);
  EXPECT_NE(out.find("libtidepool.so"), std::string::npos) << out;
  EXPECT_NE(out.find("|policy:first_fit|arg1"), std::string::npos) << out;
}

TEST(TidepoolRun, KeepsExistingPreloadEntriesFirst) {
  std::string out;
  // An empty-named entry would be ignored by the loader; a real path is kept.
  const std::string existing = sanitizer_preload_prefix() + "/lib/x86_64-linux-gnu/libm.so.6";
  run_command("LD_PRELOAD=" + existing + " " + TIDEPOOL_RUN + " -- /bin/sh -c 'echo $LD_PRELOAD'", &out);
  EXPECT_EQ(out.rfind(existing + ":", 0), 0u) << out;
  EXPECT_NE(out.find("libtidepool.so"), std::string::npos) << out;
}

// As a shell answers: 127 for no such program, 126 for a file that cannot
// be run.
TEST(TidepoolRun, AProgramNotThereIs127AndOneThatCannotRunIs126) {
  std::string out;
  EXPECT_EQ(run_command(std::string(TIDEPOOL_RUN) + " -- /nonexistent/program 2>/dev/null", &out), 127);
  EXPECT_EQ(run_command(std::string(TIDEPOOL_RUN) + " 2>/dev/null", &out), 2);
  const std::string plain = ::testing::TempDir() + "/tidepool_run_not_executable";
  std::ofstream(plain) << "not a program\n";
  EXPECT_EQ(run_command(std::string(TIDEPOOL_RUN) + " -- " + plain + " 2>/dev/null", &out), 126);
  std::remove(plain.c_str());
}

TEST(TidepoolRun, HelpHasOneUsageLineNamingTheProgramsPlace) {
  std::string out;
  EXPECT_EQ(run_command(std::string(TIDEPOOL_RUN) + " --help", &out), 0);
  std::size_t usages = 0;
  for (std::size_t at = out.find("Usage:"); at != std::string::npos; at = out.find("Usage:", at + 1)) ++usages;
  EXPECT_EQ(usages, 1u) << out;
  EXPECT_NE(out.find("Usage: tidepool-run [OPTIONS] [--] CMD [ARGS...]"), std::string::npos) << out;
}

// The program's own flags, even ones tidepool-run also has, belong to it
// once its name has come; `--` is optional.
TEST(TidepoolRun, TheSeparatorIsOptionalAndTheProgramsFlagsAreItsOwn) {
  std::string out;
  const int rc = run_command("LD_PRELOAD=" + sanitizer_preload_prefix() + " " + TIDEPOOL_RUN +
                                 " --conf policy:binned /bin/sh -c 'echo \"$TIDEPOOL_CONF|$1|$2\"' sh --conf -x",
                             &out);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "policy:binned|--conf|-x\n");
  EXPECT_EQ(run_command(std::string(TIDEPOOL_RUN) + " --no-such-option /bin/true 2>&1", &out), 2);
  EXPECT_NE(out.find("unknown option \"--no-such-option\""), std::string::npos) << out;
}

TEST(TidepoolRun, VersionIsTheLibrarysVersion) {
  std::string out;
  EXPECT_EQ(run_command(std::string(TIDEPOOL_RUN) + " --version", &out), 0);
  EXPECT_EQ(out, std::string("tidepool-run ") + TIDEPOOL_PROJECT_VERSION + "\n");
}

// A configuration tidepool would refuse stops here, before the program runs:
// under the preload it would only switch tidepool off.
TEST(TidepoolRun, ABadConfigurationIsRefusedWithStatus2AndTheProgramNeverRuns) {
  const std::string marker = ::testing::TempDir() + "/tidepool_run_ran";
  std::remove(marker.c_str());
  for (const char* conf : {"polcy:best_fit", "device_limit:1B", "evict:maybe"}) {
    std::string out;
    EXPECT_EQ(run_command(std::string(TIDEPOOL_RUN) + " --conf " + conf + " touch " + marker + " 2>&1", &out), 2)
        << conf;
    EXPECT_NE(out.find("tidepool-run: not running touch"), std::string::npos) << out;
    // Nothing passes through: the program does not run at all.
    EXPECT_EQ(out.find("passing all calls through"), std::string::npos) << out;
    std::string inherited;
    EXPECT_EQ(run_command(std::string("TIDEPOOL_CONF=") + conf + " " + TIDEPOOL_RUN + " touch " + marker + " 2>&1",
                          &inherited),
              2)
        << conf;
  }
  EXPECT_FALSE(std::ifstream(marker).good()) << "the program ran under a refused configuration";
}

// --sim: a driver-API program that opens libcuda.so.1 itself runs on the
// simulated driver, through tidepool (its report counts the allocations).
TEST(TidepoolRun, SimRunsADriverApiProgramOnTheSimulatedDriver) {
  const std::string report = ::testing::TempDir() + "/tidepool_run_sim.json";
  std::remove(report.c_str());
  std::string out;
  const int rc = run_command("LD_PRELOAD=" + sanitizer_preload_prefix() + " TIDEPOOL_SIM_MEMORY=1GiB " + TIDEPOOL_RUN +
                                 " --sim --conf report:" + report + " " + PROBE_DLOPEN + " dlsym 2>&1",
                             &out);
  EXPECT_EQ(rc, 42) << out;  // the probe's "every check held"
  // Only the allocation the probe makes into a stream capture is the driver's.
  EXPECT_NE(out.find("counts: sim_cuMemAlloc=0 sim_cuMemAllocAsync=1"), std::string::npos)
      << "the driver served allocations that tidepool should have: " << out;
  std::ifstream in(report);
  ASSERT_TRUE(in.good()) << "no report; output: " << out;
  const auto parsed = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded());
  EXPECT_EQ(parsed["passthrough"], false);
  EXPECT_EQ(parsed["devices"][0]["allocations"], 9) << parsed.dump();
}

}  // namespace
