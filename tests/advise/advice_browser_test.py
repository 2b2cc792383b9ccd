#!/usr/bin/env python3
"""tidepool-advise's HTML page in a real browser: the advisor runs on the sim
over advise_trainer (with eviction, so both series are drawn), headless
Chromium opens the page it wrote, and the test checks that no console error
or exception happens, that nothing is fetched, that each chart drew a point
per trial (a cross for each that did not fit), that the answer cards give
the JSON's answers, with the budget lines and the table, and saves a
screenshot. Chromium is driven by Selenium through chromedriver
(tests/support/chromium_page.py); without selenium, chromedriver or Chromium
it exits 77 (skipped).

usage: advice_browser_test.py TIDEPOOL_ADVISE ADVISE_TRAINER [--screenshot PNG]
"""
import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from chromium_page import SKIP, Browser, fail, find_chromium, problems_in  # noqa: E402
from preload_env import preload_env  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("advise")
    parser.add_argument("trainer")
    parser.add_argument("--screenshot", default="advice_browser.png")
    args = parser.parse_args()
    chromium, missing = find_chromium()
    if not chromium:
        print("skipped: " + missing)
        return SKIP
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix="tidepool-advice-browser-")
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    page = os.path.join(work, "advice.html")
    data = os.path.join(work, "advice.json")
    run = subprocess.run([args.advise, "--sim", "--device-limit", "100MiB", "--batch", "1:24", "--base-batch", "8",
                          "--base-lr", "0.1", "--html", page, "--json", data, "--", args.trainer, "--batch",
                          "{batch}", "--steps", "{steps}"], capture_output=True, text=True, timeout=120,
                         env=preload_env(args.advise, TIDEPOOL_SIM_MEMORY="64GiB"))
    if run.returncode != 0:
        fail("tidepool-advise exited %d: %s" % (run.returncode, run.stderr))
    advice = json.load(open(data))
    trials = advice["trials"]
    fitting = [t for t in trials if t["outcome"] == "fits"]
    timed = [t for t in fitting if t["samples_per_s"] > 0]
    if not any(t["eviction"] for t in fitting) or not any(not t["eviction"] for t in fitting):
        fail("the run should have fitting trials with and without eviction: %s" % trials)

    browser = Browser(chromium, os.path.join(work, "profile"))
    try:
        browser.open_page(1100, 1800)
        browser.load(page)
        drawn = browser.evaluate(
            "(() => { const q = (s) => document.querySelectorAll(s); return {"
            "speedPoints: q('#speed circle.point').length, speedCrosses: q('#speed g.failed').length,"
            "memoryPoints: q('#memory circle.point').length, memoryCrosses: q('#memory g.failed').length,"
            "budgetLines: q('#memory line.budget-line').length,"
            "cards: [...q('.answer')].map(c => [c.querySelector('.k').textContent, c.querySelector('.v').textContent]),"
            "rows: q('#trials tr').length,"
            "title: (q('#speed circle.point title')[0] || {}).textContent || '',"
            "notes: [...q('.note')].map(n => n.textContent) }; })()")
        problems = problems_in(browser.events)
        if problems:
            fail("the page had problems: %s" % problems)
        if drawn["speedPoints"] != len(timed):
            fail("speed chart: %d points for %d timed trials" % (drawn["speedPoints"], len(timed)))
        if drawn["memoryPoints"] != 2 * len(fitting):
            fail("memory chart: %d points for %d fitting trials (two each)" % (drawn["memoryPoints"], len(fitting)))
        failed = len(trials) - len(fitting)
        if drawn["speedCrosses"] != failed or drawn["memoryCrosses"] != failed:
            fail("crosses %s for %d trials that did not fit" % (drawn, failed))
        if drawn["budgetLines"] != 2:
            fail("budget and trial-limit lines: %d" % drawn["budgetLines"])
        if drawn["rows"] != len(trials) + 1:
            fail("table rows %d for %d trials" % (drawn["rows"], len(trials)))
        answer = advice["answer"]
        expected = [["largest without eviction", str(answer["largest_without_eviction"]["batch"])],
                    ["largest with eviction", str(answer["largest_with_eviction"]["batch"])],
                    ["most samples per second", str(answer["best"]["batch"])]]
        if drawn["cards"] != expected:
            fail("answer cards %s, expected %s" % (drawn["cards"], expected))
        if "samples/s" not in drawn["title"] or "peak reserved" not in drawn["title"]:
            fail("a point's hover text lacks its figures: %r" % drawn["title"])
        if not any("Learning rates scale" in n for n in drawn["notes"]):
            fail("no learning-rate note: %s" % drawn["notes"])
        browser.screenshot(args.screenshot, full_page=True, max_height=4000)
    finally:
        browser.close()
    print("ok: %d trials drawn, no console errors, screenshot %s (%.1f s)"
          % (len(trials), args.screenshot, time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
