// See installed_file.hpp.
#include "util/installed_file.hpp"

#include <filesystem>
#include <system_error>

namespace tidepool::util {

std::string installed_or_built(const char* relative, const char* built) {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const char* lib : {"lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"}) {
      const auto candidate = exe.parent_path().parent_path() / lib / relative;
      if (std::filesystem::exists(candidate, ec)) return candidate.string();
    }
  }
  return built;
}

}  // namespace tidepool::util
