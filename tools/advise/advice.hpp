// Advice: what tidepool-advise tells the user, in its three forms. The JSON
// document is the one source: the table printed on stdout and the HTML page
// (advice.html, a template with the document placed in it) are made from it.
#pragma once

#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "search.hpp"
#include "trial.hpp"

namespace tidepool::advise {

struct AdviceContext {
  std::string command;             // the template, as a shell shows it
  std::string budget_text;         // as given ("20GiB", "90%"), or "" for the whole device
  std::uint64_t budget_bytes = 0;  // resolved (0: unknown, no trial reported)
  double margin_percent = 0;
  std::uint64_t trial_limit_bytes = 0;  // what each trial's device_limit came to
  long min_batch = 0;
  long max_batch = 0;
  int steps = 0;
  bool steps_in_command = false;
  std::string step_marker;  // the regex, or ""
  std::optional<long> base_batch;
  std::optional<double> base_lr;
  bool sim = false;
};

// `text` with every byte that is not part of a well-formed UTF-8 sequence
// replaced by U+FFFD: a program's stderr, cut at any byte, or its arguments
// may hold such bytes, and a JSON document may not.
std::string valid_utf8(const std::string& text);

nlohmann::json advice_json(const AdviceContext& context, const std::deque<Trial>& trials, const Answer& answer);
std::string advice_table(const nlohmann::json& advice);
// A self-contained page: no network, the data inside it.
std::string advice_html(const nlohmann::json& advice);

}  // namespace tidepool::advise
