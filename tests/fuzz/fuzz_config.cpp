// Fuzz target: the TIDEPOOL_CONF parser (runtime/config.hpp).
//
// Invariants, for any bytes: parse_config returns; it either accepts (no
// error, passthrough off) or rejects with passthrough on, every field at its
// default and one printable line of at most 200 bytes as its message; the verdict does not depend
// on the order of the items (the grammar has no cross-key rule); and an
// accepted configuration holds only values its keys allow.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.hpp"
#include "pool/placement/policy.hpp"
#include "residency/eviction_policy.hpp"
#include "runtime/config.hpp"

namespace {

using tidepool::runtime::Config;
using tidepool::runtime::describe;
using tidepool::runtime::parse_config;

template <typename Names>
bool one_of(const Names& names, std::string_view value) {
  for (std::string_view name : names) {
    if (name == value) return true;
  }
  return false;
}

// The same items in reverse order, split exactly as the grammar splits them.
std::string reversed_items(std::string_view text) {
  std::vector<std::string_view> items;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::string out;
  for (auto it = items.rbegin(); it != items.rend(); ++it) {
    if (!out.empty() || it != items.rbegin()) out += ',';
    out += *it;
  }
  return out;
}

void check_message(const std::string& error) {
  static constexpr std::string_view kPrefix = "tidepool: TIDEPOOL_CONF: ";
  FUZZ_CHECK(!error.empty(), "a rejected configuration has no message");
  FUZZ_CHECK(std::string_view(error).substr(0, kPrefix.size()) == kPrefix, "message \"%s\" lacks its prefix",
             error.c_str());
  // The message goes to stderr as one line: printable ASCII (a raw newline
  // or escape from the input could forge log lines), and bounded.
  FUZZ_CHECK(error.size() <= 200, "message of %zu bytes", error.size());
  for (char c : error) FUZZ_CHECK(c >= 0x20 && c < 0x7f, "message byte 0x%02x", static_cast<unsigned char>(c));
}

void check_accepted(const Config& config) {
  FUZZ_CHECK(config.error.empty(), "accepted with error \"%s\"", config.error.c_str());
  FUZZ_CHECK(one_of(tidepool::pool::policy_names(), config.policy), "policy \"%s\"", config.policy.c_str());
  FUZZ_CHECK(one_of(tidepool::residency::eviction_policy_names(), config.evict_policy), "evict_policy \"%s\"",
             config.evict_policy.c_str());
  FUZZ_CHECK(config.hold_slack <= 100, "hold_slack %u%%", config.hold_slack);
  if (config.device_limit) {
    const auto& limit = *config.device_limit;
    if (limit.is_percent) {
      FUZZ_CHECK(std::isfinite(limit.percent) && limit.percent > 0.0 && limit.percent <= 100.0, "device_limit %g%%",
                 limit.percent);
    } else {
      FUZZ_CHECK(limit.bytes > 0, "device_limit of 0 bytes");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  static const std::string kDefaults = describe(parse_config(""));

  const Config config = parse_config(text);
  if (config.passthrough) {
    check_message(config.error);
    FUZZ_CHECK(describe(config) == kDefaults, "a rejected configuration kept \"%s\"", describe(config).c_str());
  } else {
    check_accepted(config);
  }

  const Config reversed = parse_config(reversed_items(text));
  FUZZ_CHECK(reversed.passthrough == config.passthrough, "item order changed the verdict: \"%s\" / \"%s\"",
             config.error.c_str(), reversed.error.c_str());
  FUZZ_CHECK(describe(reversed) == describe(config), "item order changed the result: %s / %s", describe(config).c_str(),
             describe(reversed).c_str());
  return 0;
}
