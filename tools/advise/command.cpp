// See command.hpp.
#include "command.hpp"

#include <string_view>

namespace tidepool::advise {

namespace {

constexpr std::string_view kBatch = "{batch}";
constexpr std::string_view kSteps = "{steps}";

std::string replace_all(std::string word, std::string_view what, const std::string& with) {
  for (std::size_t at = word.find(what); at != std::string::npos; at = word.find(what, at + with.size())) {
    word.replace(at, what.size(), with);
  }
  return word;
}

}  // namespace

bool CommandTemplate::parse(std::vector<std::string> words, CommandTemplate* out, std::string* error) {
  if (words.empty()) {
    *error = "no program given";
    return false;
  }
  bool batch = false;
  bool steps = false;
  for (const auto& w : words) {
    batch = batch || w.find(kBatch) != std::string::npos;
    steps = steps || w.find(kSteps) != std::string::npos;
  }
  if (!batch) {
    *error =
        "the command names no {batch}: put {batch} where the program reads its batch size "
        "(for example: -- python train.py --batch-size {batch})";
    return false;
  }
  out->words_ = std::move(words);
  out->names_steps_ = steps;
  return true;
}

std::vector<std::string> CommandTemplate::expand(long batch, int steps) const {
  std::vector<std::string> argv;
  argv.reserve(words_.size());
  for (const auto& w : words_) {
    argv.push_back(replace_all(replace_all(w, kBatch, std::to_string(batch)), kSteps, std::to_string(steps)));
  }
  return argv;
}

std::string CommandTemplate::text() const {
  std::string text;
  for (const auto& w : words_) {
    if (!text.empty()) text += ' ';
    const bool plain = !w.empty() && w.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos;
    text += plain ? w : "'" + replace_all(w, "'", "'\\''") + "'";
  }
  return text;
}

}  // namespace tidepool::advise
