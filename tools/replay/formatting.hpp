// How the replay tool's outputs (the table, the HTML report, the Chrome
// trace, the replay's own errors) write names, pointers and sizes: once,
// so that they all agree.
#pragma once

#include <cstdint>
#include <string>

namespace tidepool::replay {

// A trace as the outputs name it: its path's last component
// ("resnet50_b16.csv.gz" for "data/traces/resnet50_b16.csv.gz").
std::string base_name(const std::string& path);

// A pointer as a trace writes it: "0x7f3a00000000".
std::string hex(std::uint64_t value);

// Bytes in MiB with one decimal, no unit: "812.0".
std::string mib(std::uint64_t bytes);

}  // namespace tidepool::replay
