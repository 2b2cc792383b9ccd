// The project's version, one string for the library, its report and every
// tool's --version. It comes from project(VERSION) in the top-level
// CMakeLists.txt, through one compile definition on version.cpp alone, so a
// version bump rebuilds one file.
#pragma once

namespace tidepool::util {

// "MAJOR.MINOR.PATCH", as in project(tidepool VERSION ...).
const char* version() noexcept;

}  // namespace tidepool::util
