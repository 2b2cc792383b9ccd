// The command template: {batch} required, {steps} optional, both anywhere in a word.
#include "command.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "advice.hpp"

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

namespace tidepool::advise {
namespace {

TEST(AdviseText, ValidUtf8KeepsWellFormedTextAndReplacesEveryBadByte) {
  EXPECT_EQ(valid_utf8("plain ascii"), "plain ascii");
  EXPECT_EQ(valid_utf8("\xE2\x96\x88 bar \xF0\x9F\x98\x80"), "\xE2\x96\x88 bar \xF0\x9F\x98\x80");
  const std::string replacement = "\xEF\xBF\xBD";
  EXPECT_EQ(valid_utf8("\xE2\x96 x"), replacement + replacement + " x");           // cut short, then ASCII
  EXPECT_EQ(valid_utf8("end \xE2\x96"), "end " + replacement + replacement);       // cut at the end
  EXPECT_EQ(valid_utf8("\xC0\xAF"), replacement + replacement);                    // overlong
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), replacement + replacement + replacement);  // a surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), replacement + replacement + replacement + replacement);  // past U+10FFFF
  EXPECT_EQ(valid_utf8(std::string("a\0b", 3)), std::string("a\0b", 3));
  EXPECT_EQ(nlohmann::json(valid_utf8("\xFF\xFE tail")).dump(), "\"" + replacement + replacement + " tail\"");
}

}  // namespace
}  // namespace tidepool::advise
