// docs/report.md against the report itself: the doc's key column must list
// exactly the keys a report of a real run (on the sim) has, in the same
// order, so the schema cannot drift from the code; and `run.config` must
// hold one key per row of the options table, in its order.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/runtime.hpp"
#include "util/units.hpp"

namespace tidepool::runtime {
namespace {

using Json = nlohmann::ordered_json;

// The key paths of `value` in document order: "run.pid", "devices[].maps",
// "devices[].size_classes[].min_bytes". An array of objects contributes the
// keys of its first element. `leaves` are objects whose keys the doc does
// not list (run.config: the options table lists those).
void flatten(const Json& value, const std::string& prefix, const std::vector<std::string>& leaves,
             std::vector<std::string>* out) {
  for (const auto& [key, child] : value.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    out->push_back(path);
    if (std::find(leaves.begin(), leaves.end(), path) != leaves.end()) continue;
    if (child.is_object()) flatten(child, path, leaves, out);
    if (child.is_array() && !child.empty() && child[0].is_object()) flatten(child[0], path + "[]", leaves, out);
  }
}

// The first cell of each table row of docs/report.md, when it is a `key`.
std::vector<std::string> documented_keys() {
  std::ifstream in(TIDEPOOL_SOURCE_DIR "/docs/report.md");
  EXPECT_TRUE(in.good()) << "cannot read docs/report.md";
  std::vector<std::string> keys;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::size_t end = line.find('`', 3);
    if (end == std::string::npos) continue;
    keys.push_back(line.substr(3, end - 3));
  }
  return keys;
}

// The report of a short run on the sim: every device key, a size class, and
// memory made outside the pool (as the preload's cuMemCreate hook counts it).
Json report_of_a_real_run() {
  Config config = parse_config("");
  config.cuda_lib = TIDEPOOL_SIM_LIBRARY;
  auto rt = Runtime::create(config);
  EXPECT_FALSE(rt->passthrough());
  Allocator* allocator = rt->allocator(0);
  EXPECT_NE(allocator, nullptr);
  if (allocator != nullptr) {
    auto small = allocator->allocate(300, 0, false);
    auto large = allocator->allocate(3 * util::MiB, 0, false);
    EXPECT_TRUE(small.ok() && large.ok());
    if (small) {
      EXPECT_TRUE(allocator->deallocate(small.value(), 0, false).ok());
    }
    CUmemAllocationProp prop{};
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    rt->foreign_created(CUmemGenericAllocationHandle{0x1000}, prop, 2 * util::MiB, 0);
  }
  return Json::parse(report_json(rt->report()));
}

TEST(ReportSchema, DocListsExactlyTheReportsKeysInOrder) {
  const Json report = report_of_a_real_run();
  ASSERT_FALSE(report["devices"].empty());
  ASSERT_FALSE(report["devices"][0]["size_classes"].empty());
  std::vector<std::string> written;
  flatten(report, "", {"run.config"}, &written);
  const std::vector<std::string> documented = documented_keys();
  // Element by element first, for a message that names the first difference.
  for (std::size_t i = 0; i < std::min(written.size(), documented.size()); ++i) {
    ASSERT_EQ(documented[i], written[i]) << "key " << i << " of docs/report.md differs from the report";
  }
  EXPECT_EQ(documented.size(), written.size())
      << "docs/report.md lists " << documented.size() << " keys, the report has " << written.size();
}

TEST(ReportSchema, ConfigHasOneKeyPerOptionInTableOrder) {
  const Json report = report_of_a_real_run();
  std::vector<std::string> keys;
  for (const auto& [key, value] : report["run"]["config"].items()) keys.push_back(key);
  std::vector<std::string> options;
  for (const OptionInfo* o = options_begin(); o != options_end(); ++o) options.emplace_back(o->key);
  EXPECT_EQ(keys, options);
  EXPECT_EQ(report["run"]["config"]["cuda_lib"], TIDEPOOL_SIM_LIBRARY) << "the driver opened, resolved";
}

}  // namespace
}  // namespace tidepool::runtime
