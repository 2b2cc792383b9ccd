// See advice.hpp.
#include "advice.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "advice_page.hpp"  // generated from advice.html by CMakeLists.txt
#include "util/util.hpp"

namespace tidepool::advise {

namespace {

using nlohmann::json;

constexpr const char* kLearningRateCaveat =
    "linear scaling rule: multiply the rate by the batch's ratio to the base batch; when the batch grows a lot, "
    "warm the rate up over the first epochs (Goyal et al., 2017), or the first steps can diverge";

json text_or_null(const std::string& text) { return text.empty() ? json(nullptr) : json(valid_utf8(text)); }

json trial_json(const Trial& t) {
  json j = {{"trial", t.index},
            {"batch", t.batch},
            {"eviction", t.eviction},
            {"outcome", outcome_name(t.outcome)},
            {"reason", text_or_null(t.reason)},
            {"exit_code", t.exit_code},
            {"signal", t.signal},
            {"wall_s", t.wall_s},
            {"report_found", t.report_found},
            {"peak_live_bytes", t.peak_live_bytes},
            {"peak_reserved_bytes", t.peak_reserved_bytes},
            {"device_limit_bytes", t.device_limit_bytes},
            {"ooms", t.ooms},
            {"evicted_bytes", t.evicted_bytes},
            {"prefetched_bytes", t.prefetched_bytes},
            {"steps", t.steps},
            {"step_source", t.step_source.empty() ? json(nullptr) : json(t.step_source)},
            {"step_s", t.step_s},
            {"samples_per_s", t.samples_per_s},
            {"evicted_per_step_bytes", t.evicted_per_step},
            {"prefetched_per_step_bytes", t.prefetched_per_step}};
  if (!t.stderr_tail.empty()) j["stderr_tail"] = valid_utf8(t.stderr_tail);
  return j;
}

const Trial* fitting_trial(const std::deque<Trial>& trials, long batch, bool prefer_eviction) {
  const Trial* found = nullptr;
  for (const auto& t : trials) {
    if (t.batch != batch || t.outcome != Outcome::fits) continue;
    if (found == nullptr || t.eviction == prefer_eviction) found = &t;
  }
  return found;
}

json point_json(const Trial* t, const AdviceContext& c) {
  if (t == nullptr) return nullptr;
  json j = {{"batch", t->batch},
            {"trial", t->index},
            {"eviction", t->eviction},
            {"peak_reserved_bytes", t->peak_reserved_bytes},
            {"peak_live_bytes", t->peak_live_bytes},
            {"step_s", t->step_s},
            {"samples_per_s", t->samples_per_s},
            {"evicted_per_step_bytes", t->evicted_per_step}};
  if (c.base_batch && c.base_lr) j["learning_rate"] = scaled_learning_rate(*c.base_lr, *c.base_batch, t->batch);
  return j;
}

std::string mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", bytes / (1024.0 * 1024.0));
  return text;
}

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

}  // namespace

std::string valid_utf8(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const auto byte = [&text](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = byte(i);
    std::size_t length = 0;
    unsigned char low = 0x80;
    unsigned char high = 0xBF;
    if (c < 0x80) {
      length = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;   // no overlong forms
      if (c == 0xED) high = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;  // nothing past U+10FFFF
    }
    bool ok = length > 0 && i + length <= text.size();
    for (std::size_t k = 1; ok && k < length; ++k) {
      const unsigned char next = byte(i + k);
      ok = k == 1 ? next >= low && next <= high : next >= 0x80 && next <= 0xBF;
    }
    if (ok) {
      out.append(text, i, length);
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

json advice_json(const AdviceContext& c, const std::deque<Trial>& trials, const Answer& a) {
  json out;
  out["tool"] = "tidepool-advise";
  out["tidepool_version"] = util::version();
  out["command"] = valid_utf8(c.command);
  out["sim"] = c.sim;
  out["budget"] = {{"given", text_or_null(c.budget_text)},
                   {"bytes", c.budget_bytes},
                   {"margin_percent", c.margin_percent},
                   {"trial_limit_bytes", c.trial_limit_bytes}};
  out["range"] = {{"min", c.min_batch}, {"max", c.max_batch}};
  out["steps"] = c.steps;
  out["steps_in_command"] = c.steps_in_command;
  out["step_marker"] = text_or_null(c.step_marker);
  out["trials"] = json::array();
  for (const auto& t : trials) out["trials"].push_back(trial_json(t));

  json answer;
  answer["largest_without_eviction"] = point_json(
      a.largest_without_eviction > 0 ? fitting_trial(trials, a.largest_without_eviction, false) : nullptr, c);
  answer["largest_with_eviction"] =
      point_json(a.largest_with_eviction > 0 ? fitting_trial(trials, a.largest_with_eviction, true) : nullptr, c);
  answer["eviction_searched"] = a.eviction_searched;
  answer["eviction_note"] = text_or_null(a.eviction_note);
  answer["best"] = point_json(a.best, c);
  answer["learning_rate"] = nullptr;
  if (c.base_batch && c.base_lr) {
    answer["learning_rate"] = {
        {"base_batch", *c.base_batch}, {"base_lr", *c.base_lr}, {"rule", "linear"}, {"caveat", kLearningRateCaveat}};
  }
  answer["stopped_by"] = nullptr;
  if (a.stopped_by != nullptr) {
    answer["stopped_by"] = {{"trial", a.stopped_by->index},
                            {"batch", a.stopped_by->batch},
                            {"reason", valid_utf8(a.stopped_by->reason)},
                            {"stderr_tail", valid_utf8(a.stopped_by->stderr_tail)}};
  }
  answer["interrupted"] = a.interrupted;
  // Trials that fit but whose step never repeated: too few steps to trust.
  answer["untimed_trials"] = std::count_if(trials.begin(), trials.end(),
                                           [](const Trial& t) { return t.outcome == Outcome::fits && t.step_s <= 0; });
  out["answer"] = answer;
  return out;
}

std::string advice_table(const json& advice) {
  std::string s;
  char line[512];
  std::snprintf(line, sizeof line, "%5s %7s %5s  %-13s %10s %10s %9s %10s %11s %11s %7s\n", "trial", "batch", "evict",
                "result", "live MiB", "resv MiB", "step ms", "samples/s", "evict MiB", "fetch MiB", "wall s");
  s += line;
  for (const auto& t : advice["trials"]) {
    const bool fits = t["outcome"] == "fits";
    const double step_s = t["step_s"].get<double>();
    const auto per_step = [&](const char* key) {
      return fits && step_s > 0 ? mib(t[key].get<double>()) : std::string("-");
    };
    std::snprintf(line, sizeof line, "%5d %7ld %5s  %-13s %10s %10s %9s %10s %11s %11s %7.2f\n", t["trial"].get<int>(),
                  t["batch"].get<long>(), t["eviction"].get<bool>() ? "on" : "off",
                  t["outcome"].get<std::string>().c_str(), mib(t["peak_live_bytes"].get<double>()).c_str(),
                  mib(t["peak_reserved_bytes"].get<double>()).c_str(),
                  step_s > 0 ? format("%.1f", step_s * 1e3).c_str() : "-",
                  t["samples_per_s"].get<double>() > 0 ? format("%.1f", t["samples_per_s"].get<double>()).c_str() : "-",
                  per_step("evicted_per_step_bytes").c_str(), per_step("prefetched_per_step_bytes").c_str(),
                  t["wall_s"].get<double>());
    s += line;
  }
  // The MiB/s columns are per step; say so once under the table.
  s += "(live, resv: peak live and peak reserved; evict, fetch: MiB evicted and prefetched per step)\n\n";

  const json& a = advice["answer"];
  const auto lr = [&](const json& point) {
    return point.contains("learning_rate") ? ", learning rate " + format("%.6g", point["learning_rate"].get<double>())
                                           : std::string();
  };
  const auto point = [&](const char* title, const json& p, const std::string& none) {
    if (p.is_null()) {
      std::snprintf(line, sizeof line, "%-34s %s\n", title, none.c_str());
    } else {
      std::snprintf(
          line, sizeof line, "%-34s %ld (peak reserved %s MiB, %s samples/s%s)\n", title, p["batch"].get<long>(),
          mib(p["peak_reserved_bytes"].get<double>()).c_str(),
          p["samples_per_s"].get<double>() > 0 ? format("%.1f", p["samples_per_s"].get<double>()).c_str() : "?",
          lr(p).c_str());
    }
    s += line;
  };
  point("largest batch without eviction:", a["largest_without_eviction"],
        "none: the smallest batch of the range does not fit");
  if (a["eviction_searched"].get<bool>() || !a["largest_with_eviction"].is_null()) {
    point("largest batch with eviction:", a["largest_with_eviction"], "none fits even with eviction");
  }
  if (!a["eviction_note"].is_null()) s += "  eviction: " + a["eviction_note"].get<std::string>() + "\n";
  if (!a["best"].is_null()) {
    const json& b = a["best"];
    std::snprintf(line, sizeof line, "%-34s %ld (%.1f samples/s, %.1f ms per step, eviction %s%s)\n",
                  "most samples per second:", b["batch"].get<long>(), b["samples_per_s"].get<double>(),
                  b["step_s"].get<double>() * 1e3, b["eviction"].get<bool>() ? "on" : "off", lr(b).c_str());
    s += line;
  } else if (!a["largest_without_eviction"].is_null() || !a["largest_with_eviction"].is_null()) {
    s += "most samples per second:           unknown: no trial's steps could be timed (give --step-marker)\n";
  }
  if (const int untimed = a["untimed_trials"].get<int>(); untimed > 0) {
    std::snprintf(line, sizeof line,
                  "note: %d trial(s) that fit showed no repeating step (raise --steps, or give --step-marker)\n",
                  untimed);
    s += line;
  }
  if (!a["learning_rate"].is_null()) {
    std::snprintf(line, sizeof line, "learning rates scale from %.6g at batch %ld by the %s\n",
                  a["learning_rate"]["base_lr"].get<double>(), a["learning_rate"]["base_batch"].get<long>(),
                  a["learning_rate"]["caveat"].get<std::string>().c_str());
    s += line;
  }
  return s;
}

std::string advice_html(const json& advice) {
  // The document goes inside a <script> element: `<` is written as \u003c so
  // that no string in it (a command, a program's stderr) can end the element.
  std::string data = advice.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string escaped;
  escaped.reserve(data.size());
  for (const char c : data) {
    if (c == '<') {
      escaped += "\\u003c";
    } else {
      escaped += c;
    }
  }
  std::string page = kAdvicePage;
  const std::string slot = "{{ADVICE_JSON}}";
  const auto at = page.find(slot);
  if (at != std::string::npos) page.replace(at, slot.size(), escaped);
  return page;
}

}  // namespace tidepool::advise
