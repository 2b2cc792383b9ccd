// Parsing TIDEPOOL_CONF. Dispatch, defaults, --help and the markdown table
// all come from the rows of TIDEPOOL_OPTIONS, so they cannot drift apart.
#include "runtime/config.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pool/pool.hpp"
#include "residency/residency.hpp"

namespace tidepool::runtime {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// How a key or value from the input appears in an error line: printable
// ASCII only (a raw newline or escape sequence would forge log lines), and
// short.
std::string quoted(std::string_view text, std::size_t limit = 24) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (i == limit) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(text[i]);
    out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  }
  return out + "\"";
}

// Edits (insert, delete, substitute, swap two neighbours) from `a` to `b`.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitute = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitute});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    before.swap(previous);
    previous.swap(current);
  }
  return previous[b.size()];
}

// The name in `names` nearest to a mistyped `value`, when it is near enough
// to be meant; null otherwise.
template <typename Names>
std::string_view nearest_name(std::string_view value, const Names& names) {
  std::string_view nearest;
  if (value.size() > 64) return nearest;  // no name is that long; and the distance costs value × name
  std::size_t best = std::max<std::size_t>(2, value.size() / 3) + 1;
  for (std::string_view name : names) {
    const std::size_t distance = edit_distance(value, name);
    if (distance < best) {
      best = distance;
      nearest = name;
    }
  }
  return nearest;
}

// "one of a b c", and the nearest of them to `value` when there is one.
template <typename Names>
std::string one_of(std::string_view value, const Names& names) {
  std::string expected = "one of";
  // Appended piecewise: `" " + std::string(name)` trips GCC 12's -Wrestrict
  // false positive at -O3.
  for (std::string_view name : names) {
    expected += ' ';
    expected.append(name);
  }
  if (const std::string_view nearest = nearest_name(value, names); !nearest.empty()) {
    expected += "; did you mean \"";
    expected.append(nearest);
    expected += "\"?";
  }
  return expected;
}

// Each kind: parse `value` into the field, or say what was expected.
bool parse_size_or_percent(std::string_view value, std::optional<util::SizeSpec>& out, std::string& expected) {
  auto spec = util::parse_size(value);
  // A percentage is checked against the device once its size is known.
  if (!spec || (!spec->is_percent && spec->bytes < kMinimumBudget) || (spec->is_percent && spec->percent <= 0.0)) {
    expected = "a size of at least 2MiB like 8GiB or 512MiB, or a percentage like 80%";
    return false;
  }
  out = *spec;
  return true;
}

// Zero keeps the default; anything else must hold at least one page.
bool parse_cache_size(std::string_view value, std::uint64_t& out, std::string& expected) {
  auto spec = util::parse_size(value);
  if (!spec || spec->is_percent || (spec->bytes != 0 && spec->bytes < kMinimumBudget)) {
    expected = "0 (the default) or a size of at least 2MiB like 16GiB";
    return false;
  }
  out = spec->bytes;
  return true;
}

bool parse_size(std::string_view value, std::uint64_t& out, std::string& expected) {
  auto spec = util::parse_size(value);
  if (!spec || spec->is_percent) {
    expected = "a size like 1MiB or 4096";
    return false;
  }
  out = spec->bytes;
  return true;
}

// A whole percentage from 0% to 100%; the sign is required, so that a bare
// number is never mistaken for a size.
bool parse_percent(std::string_view value, unsigned& out, std::string& expected) {
  expected = "a whole percentage from 0% to 100%";
  if (value.size() < 2 || value.size() > 4 || value.back() != '%') return false;
  unsigned parsed = 0;
  for (char c : value.substr(0, value.size() - 1)) {
    if (c < '0' || c > '9') return false;
    parsed = parsed * 10 + static_cast<unsigned>(c - '0');
  }
  if (parsed > 100) return false;
  out = parsed;
  return true;
}

// Case aside: PyTorch's own settings are written `expandable_segments:True`.
bool parse_switch(std::string_view value, bool& out, std::string& expected) {
  const auto is = [&](std::string_view word) {
    return value.size() == word.size() && std::equal(value.begin(), value.end(), word.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == b;
           });
  };
  if (is("on") || is("true") || is("yes") || value == "1") {
    out = true;
    return true;
  }
  if (is("off") || is("false") || is("no") || value == "0") {
    out = false;
    return true;
  }
  expected = "on or off (or true, false, yes, no, 1, 0)";
  return false;
}

// A name from `names` (placement or eviction policies).
template <typename Names>
bool parse_name_from(const Names& names, std::string_view value, std::string& out, std::string& expected) {
  for (std::string_view name : names) {
    if (name == value) {
      out = std::string(value);
      return true;
    }
  }
  expected = one_of(value, names);
  return false;
}

bool parse_policy(std::string_view value, std::string& out, std::string& expected) {
  return parse_name_from(pool::policy_names(), value, out, expected);
}

bool parse_evict_policy(std::string_view value, std::string& out, std::string& expected) {
  return parse_name_from(residency::eviction_policy_names(), value, out, expected);
}

bool parse_prefetch_mode(std::string_view value, PrefetchMode& out, std::string& expected) {
  static constexpr std::pair<std::string_view, PrefetchMode> kModes[] = {{"off", PrefetchMode::off},
                                                                         {"hints", PrefetchMode::hints},
                                                                         {"launch", PrefetchMode::launch},
                                                                         {"learn", PrefetchMode::learn}};
  for (const auto& [name, mode] : kModes) {
    if (name == value) {
      out = mode;
      return true;
    }
  }
  static constexpr std::string_view kNames[] = {"off", "hints", "launch", "learn"};
  expected = one_of(value, kNames);
  return false;
}

constexpr std::string_view kCompressNames[] = {"off", "zero", "auto"};  // by CompressMode

bool parse_compress_mode(std::string_view value, CompressMode& out, std::string& expected) {
  for (std::size_t i = 0; i < std::size(kCompressNames); ++i) {
    if (kCompressNames[i] == value) {
      out = static_cast<CompressMode>(i);
      return true;
    }
  }
  expected = one_of(value, kCompressNames);
  return false;
}

// `%p` becomes the process id, so that the processes of one job (one per
// GPU under torch.distributed, workers of torch.multiprocessing) each write
// their own file from one TIDEPOOL_CONF; `%%` is a `%`.
bool parse_path(std::string_view value, std::string& out, std::string& expected) {
  expected = "a path (%p for the process id, %% for a %)";
  if (value.empty()) return false;
  std::string path;
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (value[i] != '%') {
      path += value[i];
      continue;
    }
    if (i + 1 == value.size()) return false;
    const char next = value[++i];
    if (next == 'p') {
      path += std::to_string(::getpid());
    } else if (next == '%') {
      path += '%';
    } else {
      return false;
    }
  }
  out = std::move(path);
  return true;
}

bool parse_log_level(std::string_view value, LogLevel& out, std::string& expected) {
  static constexpr std::pair<std::string_view, LogLevel> kLevels[] = {
      {"off", LogLevel::off},   {"error", LogLevel::error}, {"warn", LogLevel::warn},
      {"info", LogLevel::info}, {"debug", LogLevel::debug}, {"trace", LogLevel::trace}};
  for (const auto& [name, level] : kLevels) {
    if (name == value) {
      out = level;
      return true;
    }
  }
  static constexpr std::string_view kNames[] = {"off", "error", "warn", "info", "debug", "trace"};
  expected = one_of(value, kNames);
  return false;
}

// Applies one key; false with `expected` set on a bad value, false with
// `expected` empty for an unknown key.
bool apply(Config& config, std::string_view key, std::string_view value, std::string& expected) {
#define TIDEPOOL_APPLY_OPTION(name, kind, default_value, description) \
  if (key == #name) return parse_##kind(value, config.name, expected);
  TIDEPOOL_OPTIONS(TIDEPOOL_APPLY_OPTION)
#undef TIDEPOOL_APPLY_OPTION
  expected.clear();
  return false;
}

constexpr OptionInfo kOptions[] = {
#define TIDEPOOL_OPTION_ROW(name, kind, default_value, description) {#name, #kind, default_value, description},
    TIDEPOOL_OPTIONS(TIDEPOOL_OPTION_ROW)
#undef TIDEPOOL_OPTION_ROW
};

Config defaults() {
  Config config;
  for (const OptionInfo& option : kOptions) {
    std::string expected;
    if (*option.default_value != '\0') (void)apply(config, option.key, option.default_value, expected);
  }
  return config;
}

// The known key nearest to a misspelt one, when it is near enough to be meant.
std::string_view nearest_key(std::string_view key) {
  std::vector<std::string_view> keys;
  for (const OptionInfo& option : kOptions) keys.emplace_back(option.key);
  return nearest_name(key, keys);
}

Config invalid(std::string message) {
  Config config = defaults();
  config.passthrough = true;
  // What is wrong, not what follows from it: the preload passes every call
  // through (config_from_environment says so), tidepool-run refuses to run.
  config.error = "tidepool: TIDEPOOL_CONF: " + message;
  if (config.error.size() > kMaxErrorLine) config.error.replace(kMaxErrorLine - 3, std::string::npos, "...");
  return config;
}

}  // namespace

const char* compress_mode_name(CompressMode mode) noexcept {
  return kCompressNames[static_cast<std::size_t>(mode)].data();
}

const OptionInfo* options_begin() { return std::begin(kOptions); }
const OptionInfo* options_end() { return std::end(kOptions); }

Config parse_config(std::string_view text) {
  Config config = defaults();
  if (trim(text).empty()) return config;
  std::vector<std::string_view> seen;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view item = trim(text.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) return invalid("empty item (a stray comma?)");
    const std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) return invalid("item " + quoted(item) + " has no ':' (expected key:value)");
    const std::string_view key = trim(item.substr(0, colon));
    const std::string_view value = trim(item.substr(colon + 1));
    for (std::string_view earlier : seen) {
      if (earlier == key) return invalid("key " + quoted(key) + " given twice");
    }
    seen.push_back(key);
    std::string expected;
    if (!apply(config, key, value, expected)) {
      if (expected.empty()) {
        const std::string_view nearest = nearest_key(key);
        return invalid("unknown key " + quoted(key) +
                       (!nearest.empty() ? " (did you mean \"" + std::string(nearest) + "\"?)"
                                         : std::string(" (tidepool-run --help lists the keys)")));
      }
      return invalid("bad value " + quoted(value) + " for key " + quoted(key) + " (expected " + expected + ")");
    }
    if (comma == text.size()) break;
  }
  return config;
}

Config config_from_environment() {
  // secure_getenv: a setuid or setgid program runs with every default, so the
  // environment of whoever started it cannot direct its file output.
  const char* text = ::secure_getenv("TIDEPOOL_CONF");
  Config config = parse_config(text != nullptr ? text : "");
  if (config.passthrough) std::fprintf(stderr, "%s\n", passthrough_line(config).c_str());
  return config;
}

std::string passthrough_line(const Config& config) {
  constexpr std::string_view kFollows = "; passing all calls through to the driver";
  std::string line = config.error;
  if (line.size() + kFollows.size() > kMaxErrorLine) {
    line.replace(kMaxErrorLine - kFollows.size() - 3, std::string::npos, "...");
  }
  return line.append(kFollows);
}

const char* budget_problem(std::uint64_t bytes, std::uint64_t device_total) {
  if (bytes < kMinimumBudget) return "it leaves less than 2MiB";
  if (bytes > device_total) return "it is more than the device has";
  return nullptr;
}

std::string check_device_limit(const Config& config, int device, std::uint64_t device_total) {
  if (!config.device_limit) return {};
  const std::uint64_t limit = config.device_limit->resolve(device_total);
  const char* problem = budget_problem(limit, device_total);
  if (problem == nullptr) return {};
  std::string given =
      config.device_limit->is_percent ? std::to_string(config.device_limit->percent) + "%" : util::format_size(limit);
  std::string line = "tidepool: TIDEPOOL_CONF: device_limit " + given + " cannot work on device " +
                     std::to_string(device) + " (" + util::format_size(device_total) + "): " + problem +
                     "; passing that device's allocations through to the driver";
  if (line.size() > kMaxErrorLine) line.replace(kMaxErrorLine - 3, std::string::npos, "...");
  return line;
}

std::string describe(const Config& config) {
  std::string limit = "device";
  if (config.device_limit) {
    limit = config.device_limit->is_percent ? std::to_string(config.device_limit->percent) + "%"
                                            : std::to_string(config.device_limit->bytes) + "B";
  }
  static constexpr const char* kLevelNames[] = {"off", "error", "warn", "info", "debug", "trace"};
  static constexpr const char* kPrefetchNames[] = {"off", "hints", "launch", "learn"};
  return "device_limit:" + limit + ",policy:" + config.policy + ",evict:" + (config.evict ? "on" : "off") +
         ",host_cache:" + std::to_string(config.host_cache) + ",evict_policy:" + config.evict_policy +
         ",prefetch:" + kPrefetchNames[static_cast<int>(config.prefetch)] +
         ",compress:" + compress_mode_name(config.compress) + ",free_barrier:" + (config.free_barrier ? "on" : "off") +
         ",small_size:" + std::to_string(config.small_size) + ",hold_slack:" + std::to_string(config.hold_slack) +
         "%,report:" + config.report + ",trace:" + config.trace + ",log:" + kLevelNames[static_cast<int>(config.log)] +
         ",log_file:" + config.log_file + ",cuda_lib:" + config.cuda_lib;
}

std::string options_markdown() {
  std::string out = "| key | kind | default | description |\n|---|---|---|---|\n";
  for (const OptionInfo& option : kOptions) {
    out += std::string("| `") + option.key + "` | " + option.kind + " | " +
           (*option.default_value != '\0' ? std::string("`") + option.default_value + "`" : std::string("—")) + " | " +
           option.description + " |\n";
  }
  return out;
}

std::string options_help() {
  std::string out = "TIDEPOOL_CONF keys (key:value, comma-separated):\n";
  for (const OptionInfo& option : kOptions) {
    std::string left = std::string("  ") + option.key + " (" + option.kind + ", default " +
                       (*option.default_value != '\0' ? option.default_value : "-") + ")";
    out += left + "\n      " + option.description + "\n";
  }
  return out;
}

}  // namespace tidepool::runtime
