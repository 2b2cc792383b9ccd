// CommandTemplate: the user's command with its placeholders, `{batch}` (the
// trial's batch size, required) and `{steps}` (the steps a trial asks for,
// optional). A placeholder may sit inside a word (`--batch-size={batch}`)
// and appear more than once.
#pragma once

#include <string>
#include <vector>

namespace tidepool::advise {

class CommandTemplate {
 public:
  // The template of `words`; false with `error` when it names no {batch}.
  static bool parse(std::vector<std::string> words, CommandTemplate* out, std::string* error);

  // The command of one trial.
  [[nodiscard]] std::vector<std::string> expand(long batch, int steps) const;
  [[nodiscard]] bool names_steps() const noexcept { return names_steps_; }
  // The command as a shell would show it, with the placeholders.
  [[nodiscard]] std::string text() const;

 private:
  std::vector<std::string> words_;
  bool names_steps_ = false;
};

}  // namespace tidepool::advise
