// The command template: {batch} required, {steps} optional, both anywhere in a word.
#include "command.hpp"

#include <gtest/gtest.h>

namespace tidepool::advise {
namespace {

TEST(AdviseCommand, ReplacesEveryPlaceholderInsideWords) {
  CommandTemplate c;
  std::string error;
  ASSERT_TRUE(CommandTemplate::parse(
      {"python", "train.py", "--batch-size={batch}", "--steps", "{steps}", "b{batch}x{batch}"}, &c, &error));
  EXPECT_TRUE(c.names_steps());
  const auto argv = c.expand(48, 6);
  EXPECT_EQ(argv, (std::vector<std::string>{"python", "train.py", "--batch-size=48", "--steps", "6", "b48x48"}));
}

TEST(AdviseCommand, RefusesACommandWithoutBatch) {
  CommandTemplate c;
  std::string error;
  EXPECT_FALSE(CommandTemplate::parse({"python", "train.py", "--batch", "32"}, &c, &error));
  EXPECT_NE(error.find("{batch}"), std::string::npos);
  EXPECT_FALSE(CommandTemplate::parse({}, &c, &error));
  EXPECT_EQ(error, "no program given");
}

TEST(AdviseCommand, TextQuotesWhatAShellWouldSplit) {
  CommandTemplate c;
  std::string error;
  ASSERT_TRUE(CommandTemplate::parse({"run", "--name", "it's a test", "{batch}"}, &c, &error));
  EXPECT_FALSE(c.names_steps());
  EXPECT_EQ(c.text(), "run --name 'it'\\''s a test' {batch}");
}

}  // namespace
}  // namespace tidepool::advise
