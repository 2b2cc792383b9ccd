// Where the tools find the files they hand to a program: libtidepool.so and
// the simulated driver, installed beside the tool or, in a build tree, where
// the build put them.
#pragma once

#include <string>

namespace tidepool::util {

// PREFIX/lib*/RELATIVE when the running program is PREFIX/bin/TOOL and that
// file exists (lib, lib64 and the Debian multiarch folders are tried);
// otherwise `built`, the build tree's copy.
std::string installed_or_built(const char* relative, const char* built);

}  // namespace tidepool::util
