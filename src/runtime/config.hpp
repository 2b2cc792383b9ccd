// Config: TIDEPOOL_CONF parsed once into typed fields.
//
// Grammar: `key:value` items separated by commas; whitespace around items,
// keys and values is ignored; an empty string means every default. Any error
// (an unknown key, a bad value, a duplicate key, an item without ':') makes
// the whole configuration invalid: `passthrough` is set, `error` holds one
// line naming the key, and tidepool then passes every call through to the
// driver. Nothing is ever printed here; the caller writes `error` to stderr.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/options.hpp"
#include "util/util.hpp"

namespace tidepool::runtime {

// The smallest budget (device_limit, host_cache) that can hold anything: one
// page of the VMM granularity of every current NVIDIA GPU.
inline constexpr std::uint64_t kMinimumBudget = 2 * util::MiB;
// Error lines are printable ASCII and at most this long, whatever the input.
inline constexpr std::size_t kMaxErrorLine = 200;

enum class LogLevel { off, error, warn, info, debug, trace };
enum class PrefetchMode { off, hints, launch, learn };
enum class CompressMode { off, zero, automatic };
// Its name as TIDEPOOL_CONF spells it (off, zero, auto).
const char* compress_mode_name(CompressMode mode) noexcept;

// Every field's default is its row's in options.hpp: parse_config applies
// the table before the text. A Config not made by parse_config holds zeros.
struct Config {
  std::optional<util::SizeSpec> device_limit;  // unset: what the device reports
  std::string policy;
  bool evict = false;
  std::uint64_t host_cache = 0;  // 0: half the host's memory
  std::string evict_policy;
  PrefetchMode prefetch = PrefetchMode::off;
  CompressMode compress = CompressMode::off;
  bool free_barrier = false;
  std::uint64_t small_size = 0;
  unsigned hold_slack = 0;  // percent
  std::string report;
  std::string trace;
  LogLevel log = LogLevel::off;
  std::string log_file;
  std::string cuda_lib;

  bool passthrough = false;  // the configuration was invalid
  std::string error;         // the one-line reason, when passthrough
};

Config parse_config(std::string_view text);
// Parses $TIDEPOOL_CONF (unset means defaults) and, on error, writes
// passthrough_line() to stderr.
Config config_from_environment();
// What the preload says of a refused configuration: its error and what
// follows from it, in one line of at most kMaxErrorLine.
std::string passthrough_line(const Config& config);
// The one rule for a device budget, however it is set (TIDEPOOL_CONF's
// device_limit, tidepool_set_device_limit): null when `bytes` can work on a
// device of `device_total` bytes, else why not ("it leaves less than 2MiB",
// "it is more than the device has").
const char* budget_problem(std::uint64_t bytes, std::uint64_t device_total);
// device_limit checked against a device of `device_total` bytes: empty when
// it can work, else the one error line (the whole configuration's kind of
// refusal, for that device: its allocations pass through to the driver).
std::string check_device_limit(const Config& config, int device, std::uint64_t device_total);
// A one-line summary of every key's value, for a debug log line.
std::string describe(const Config& config);

struct OptionInfo {
  const char* key;
  const char* kind;
  const char* default_value;
  const char* description;
};
// The rows of TIDEPOOL_OPTIONS, in table order.
const OptionInfo* options_begin();
const OptionInfo* options_end();
// The options as a markdown table (docs/configuration.md) or plain text (--help).
std::string options_markdown();
std::string options_help();

}  // namespace tidepool::runtime
