#!/usr/bin/env python3
"""The HTML report in a real browser: headless Chromium opens a report made
by tidepool-replay from small synthetic traces (one with a hostile name) and
several policies, and the test checks that no console error or exception
happens, that nothing is fetched from the network, that every chart drew,
that hover shows values and drag zooms, that the report's JS helpers compute
what they should, and that the hostile name stays text. It saves a
screenshot. Chromium is driven by Selenium through chromedriver
(tests/support/chromium_page.py); without selenium, chromedriver or Chromium
the test exits 77 (skipped).

usage: html_report_browser_test.py TIDEPOOL_REPLAY [--screenshot PNG] [--full-page] [--keep HTML] [TRACE...]
Traces given on the command line replace the synthetic ones.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from chromium_page import SKIP, Browser, fail, find_chromium, problems_in  # noqa: E402

DEADLINE_S = 45
POLICIES = ["best_fit", "first_fit", "worst_fit", "pytorch_rules", "rmm_pool"]
HOSTILE = "<img src=x id=pwned onerror=alert(1)> & \"quotes\" 'q'.csv"


def stamp(us):
    """RMM's time column: HH:MM:SS:microseconds."""
    return "%02d:%02d:%02d:%06d" % (us // 3600000000, us // 60000000 % 60, us // 1000000 % 60, us % 1000000)


# The last owner's name is hostile: it must stay text in the legend, the table and the tooltip.
OWNERS = ["libc10_cuda.so", "libcublasLt.so.12", "libnccl.so.2", "lib<img src=x onerror=alert(4)>.so"]


def write_trace(path, seed, steps, owners=False):
    """A training-shaped trace: weights kept, then steps that allocate and
    free. With `owners`, tidepool's Owner column names who asked."""
    rng = random.Random(seed)
    lines = ["Thread,Time,Action,Pointer,Size,Stream" + (",Owner" if owners else "")]
    owner = (lambda i: "," + OWNERS[i % len(OWNERS)]) if owners else (lambda i: "")
    free_owner = "," if owners else ""
    t = 0
    pointer = 0x10000
    for _ in range(20):
        t += rng.randint(500, 5000)
        lines.append("0,%s,allocate,0x%x,%d,0%s" % (stamp(t), pointer, rng.randint(1 << 16, 1 << 23), owner(0)))
        pointer += 0x1000
    sizes = [rng.randint(1 << 10, 1 << 24) for _ in range(60)]
    for _ in range(steps):
        live = []
        for k, size in enumerate(sizes):
            t += rng.randint(500, 5000)
            lines.append("0,%s,allocate,0x%x,%d,%d%s" % (stamp(t), pointer, size, rng.choice([0, 7]), owner(k)))
            live.append(pointer)
            pointer += 0x1000
            if rng.random() < 0.3 and len(live) > 3:
                t += 3
                lines.append("0,%s,free,0x%x,0,0%s" % (stamp(t), live.pop(rng.randrange(len(live) - 1)), free_owner))
        for p in live:
            t += rng.randint(1, 10)
            lines.append("0,%s,free,0x%x,0,0%s" % (stamp(t), p, free_owner))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("replay")
    parser.add_argument("--screenshot", default="html_report_browser.png")
    parser.add_argument("--full-page", action="store_true", help="capture the whole page, not the first 3000 px")
    parser.add_argument("--keep", help="also copy the report here")
    parser.add_argument("traces", nargs="*")
    args = parser.parse_intermixed_args()
    started = time.monotonic()

    chromium, missing = find_chromium()
    if not chromium:
        print("skipped: " + missing)
        return SKIP

    work = tempfile.mkdtemp(prefix="tidepool-report-browser-")
    try:
        traces = args.traces
        if not traces:
            traces = [os.path.join(work, "synthetic_steps.csv"), os.path.join(work, HOSTILE)]
            write_trace(traces[0], 1, 6, owners=True)
            write_trace(traces[1], 2, 4)
        report = os.path.join(work, "report.html")
        command = [args.replay, "--html", report]
        for p in POLICIES if not args.traces else ["all"]:
            command += ["--policy", p]
        replay = subprocess.run(command + traces, capture_output=True, text=True, timeout=DEADLINE_S)
        if replay.returncode != 0:
            fail("tidepool-replay exited %d: %s" % (replay.returncode, replay.stderr))
        if args.keep:
            shutil.copyfile(report, args.keep)

        browser = Browser(chromium, os.path.join(work, "profile"))
        try:
            browser.open_page(1400, 3000)
            browser.load(report)

            charts = browser.evaluate(
                "[...document.querySelectorAll('[data-chart]')].map(c => ({id: c.id, kind: c.dataset.chart, "
                "drawn: Number(c.dataset.drawn || 0), error: c.dataset.error || '', "
                "svgs: c.querySelectorAll('svg').length}))")
            kinds = {c["kind"] for c in charts}
            if kinds != {"utilization", "calls", "timeline", "pool", "bands"}:
                fail("chart kinds %s" % sorted(kinds))
            if sum(c["kind"] == "timeline" for c in charts) != len(traces):
                fail("one timeline per trace expected: %s" % charts)
            for c in charts:
                if c["error"] or c["drawn"] <= 0 or c["svgs"] == 0:
                    fail("chart %s did not draw: %s" % (c["id"], c))
            policies_drawn = browser.evaluate("tidepoolReport.data.policies.length")
            expected = len(POLICIES) if not args.traces else None
            if expected is not None and policies_drawn != expected:
                fail("%d policies in the data, %d expected" % (policies_drawn, expected))
            # A timeline draws the live area and one line per policy.
            first = next(c for c in charts if c["kind"] == "timeline")
            if expected is not None and first["drawn"] != expected + 1:
                fail("timeline drew %d series, expected %d" % (first["drawn"], expected + 1))
            # The pool at another moment: the slider redraws every strip from
            # that moment's layout.
            moved = browser.evaluate(
                "(() => { const c = document.querySelector('[data-chart=pool]');"
                "const s = c.querySelector('input.moment-slider'); if (!s) return {slider: false};"
                "const peak = c.querySelector('.moment-text').textContent;"
                "s.value = String(Math.max(1, Math.floor(Number(s.max) / 2)));"
                "s.dispatchEvent(new Event('input'));"
                "return {slider: true, max: Number(s.max), moment: c.dataset.moment, drawn: Number(c.dataset.drawn),"
                "peak: peak, text: c.querySelector('.moment-text').textContent}; })()")
            if expected is not None and (not moved["slider"] or moved["max"] < 2 or moved["moment"] == "0" or
                                         moved["drawn"] <= 0 or "live peak" not in moved["peak"] or
                                         "into the trace" not in moved["text"]):
                fail("the pool's time slider: %s" % moved)
            # Step boundaries: one dashed line per detected step after the first.
            steps = browser.evaluate(
                "(() => { const c = document.querySelector('[data-chart=timeline]');"
                "return {lines: c.querySelectorAll('line.step').length,"
                "labels: [...c.querySelectorAll('.step-label')].map(t => t.textContent),"
                "data: tidepoolReport.data.traces[Number(c.dataset.trace)].steps.length}; })()")
            if expected is not None and (steps["data"] < 2 or steps["lines"] != steps["data"] or
                                         steps["labels"][0] != "step 1"):
                fail("step boundaries on the first timeline: %s" % steps)

            # Allocations over time: bands coloured by owner, a legend naming
            # them, and the owners table; a trace without owners says so.
            if not args.traces:
                owned = browser.evaluate(
                    "(() => { const c = document.querySelector('[data-chart=bands]');"
                    "const t = tidepoolReport.data.traces[Number(c.dataset.trace)].allocations;"
                    "const table = c.parentElement.querySelector('table.owners');"
                    "return {bands: c.querySelectorAll('polygon.band').length, drawnBands: t.bands.length,"
                    "legend: c.querySelector('.legend').textContent,"
                    "rows: table ? [...table.querySelectorAll('tbody tr td:first-child')].map(d => d.textContent) : [],"
                    "plain: document.getElementById('trace-1').textContent.includes('names no owners')}; })()")
                if browser.evaluate("document.querySelectorAll('img').length") != 0:
                    fail("an owner's name became markup")
                if owned["bands"] < owned["drawnBands"] or owned["drawnBands"] == 0:
                    fail("bands chart: %s" % owned)
                if sorted(owned["rows"]) != sorted(OWNERS) or not all(o in owned["legend"] for o in OWNERS):
                    fail("owners table and legend: %s" % owned)
                if "(framework)" not in owned["legend"] or "(cuBLAS)" not in owned["legend"]:
                    fail("owner kinds in the legend: %s" % owned["legend"])
                if not owned["plain"]:
                    fail("the trace without an Owner column does not say so: %s" % owned)
                # Hover over a band: its allocation, with the owner.
                band = browser.evaluate(
                    "(() => { const c = document.querySelector('[data-chart=bands]'); c.scrollIntoView();"
                    "const origin = c.querySelector('svg').getBoundingClientRect();"
                    # The middle of each band's polygon: point i of its top edge
                    # and its mirror on the bottom edge share x; the thickest wins.
                    "const mids = [...c.querySelectorAll('polygon.band')].map(p => {"
                    "  const pts = p.getAttribute('points').split(' ').map(q => q.split(',').map(Number));"
                    "  const n = pts.length / 2; const i = Math.floor(n / 2);"
                    "  const top = pts[i]; const bottom = pts[pts.length - 1 - i];"
                    "  return {x: top[0], y: (top[1] + bottom[1]) / 2, h: bottom[1] - top[1]}; });"
                    "const best = mids.sort((a, b) => b.h - a.h)[0];"
                    "return {x: origin.left + best.x, y: origin.top + best.y, id: c.id}; })()")
                browser.mouse("mouseMoved", band["x"], band["y"])
                tip = browser.evaluate("document.querySelector('#%s .tooltip').textContent" % band["id"])
                if "trace line" not in tip or "owner" not in tip or not any(o in tip for o in OWNERS):
                    fail("hover over a band: %r" % tip)
                # Drag along the bands: zoomed, still drawn; double-click goes back.
                area = browser.evaluate(
                    "(() => { const r = document.querySelector('#%s rect[cursor=crosshair]')"
                    ".getBoundingClientRect(); return {x: r.left, y: r.top, w: r.width, h: r.height}; })()"
                    % band["id"])
                y = area["y"] + area["h"] / 2
                browser.mouse("mousePressed", area["x"] + area["w"] * 0.3, y, buttons=1, button="left", clicks=1)
                browser.mouse("mouseMoved", area["x"] + area["w"] * 0.5, y, buttons=1, button="left")
                browser.mouse("mouseReleased", area["x"] + area["w"] * 0.5, y, buttons=0, button="left", clicks=1)
                zoomed = browser.evaluate("(() => { const d = document.getElementById('%s').dataset; "
                                          "return {zoomed: d.zoomed, drawn: Number(d.drawn)}; })()" % band["id"])
                if zoomed["zoomed"] != "1" or zoomed["drawn"] <= 0:
                    fail("dragging along the bands did not zoom: %s" % zoomed)
                browser.mouse("mousePressed", area["x"] + area["w"] * 0.4, y, buttons=1, button="left", clicks=2)
                browser.mouse("mouseReleased", area["x"] + area["w"] * 0.4, y, buttons=0, button="left", clicks=2)
                if browser.evaluate("document.getElementById('%s').dataset.zoomed" % band["id"]) != "0":
                    fail("double-click did not reset the bands' zoom")
                browser.mouse("mouseMoved", 0, 0)

            # The helpers the charts are built on.
            checks = browser.evaluate(
                "(() => { const r = tidepoolReport; return {"
                "ticks: r.niceTicks(0, 10, 5), ticks2: r.niceTicks(0.3, 1.7, 4),"
                "mib: r.formatBytes(1.5 * 1048576), gib: r.formatBytes(3 * 1073741824), b: r.formatBytes(512),"
                "s: r.formatTime(2.5e6), ms: r.formatTime(1500), s90: r.formatTime(90e6), min: r.formatTime(600e6),"
                "at: [r.indexAt([10, 20, 30], 5), r.indexAt([10, 20, 30], 20), r.indexAt([10, 20, 30], 99)],"
                "gibTicks: r.unitTicks(0, 2 * 1073741824, 4, [[1073741824, 'GiB'], [1048576, 'MiB'], [1, 'B']])"
                "  .ticks.map(v => v / 1073741824),"
                "rank: r.rank({runs: [{failed: 1, util: 0.99, peak_reserved: 5}, {failed: 0, util: 0.5, "
                "peak_reserved: 9}, {failed: 0, util: 0.9, peak_reserved: 7}]})}; })()")
            want = {"ticks": [0, 2, 4, 6, 8, 10], "ticks2": [0.5, 1, 1.5], "mib": "1.50 MiB", "gib": "3.00 GiB",
                    "b": "512 B", "s": "2.50 s", "ms": "1.50 ms", "s90": "90.0 s", "min": "10.0 min", "at": [0, 1, 2],
                    "gibTicks": [0, 0.5, 1, 1.5, 2], "rank": [2, 1, 0]}
            for key, value in want.items():
                if checks[key] != value:
                    fail("report.js %s: got %r, want %r" % (key, checks[key], value))

            # The hostile trace name is text wherever it appears.
            if not args.traces:
                hostile = browser.evaluate(
                    "({injected: document.getElementById('pwned') !== null, "
                    "text: document.body.textContent.includes(%s)})" % json.dumps(HOSTILE))
                if hostile["injected"] or not hostile["text"]:
                    fail("hostile trace name: %s" % hostile)

            # Hover over the first timeline: a tooltip with a value per policy.
            box = browser.evaluate(
                "(() => { const c = document.querySelector('[data-chart=timeline]'); c.scrollIntoView(); "
                "const r = c.querySelector('rect[cursor=crosshair]').getBoundingClientRect(); "
                "return {x: r.left, y: r.top, w: r.width, h: r.height, id: c.id}; })()")
            mid_x = box["x"] + box["w"] * 0.5
            mid_y = box["y"] + box["h"] * 0.5
            browser.mouse("mouseMoved", mid_x, mid_y)
            tip = browser.evaluate(
                "(() => { const t = document.querySelector('#%s .tooltip'); "
                "return {shown: t.style.display === 'block', text: t.textContent}; })()" % box["id"])
            if not tip["shown"] or "since the first event" not in tip["text"]:
                fail("no tooltip on hover: %s" % tip)
            if expected is not None and not all(p in tip["text"] for p in POLICIES):
                fail("tooltip lacks a policy: %s" % tip["text"])

            # Drag across the middle fifth: zoomed in, x range narrowed; reset restores it.
            before = browser.evaluate("(() => { const d = document.getElementById('%s').dataset; "
                                      "return [Number(d.x0), Number(d.x1)]; })()" % box["id"])
            browser.mouse("mousePressed", box["x"] + box["w"] * 0.4, mid_y, buttons=1, button="left", clicks=1)
            browser.mouse("mouseMoved", box["x"] + box["w"] * 0.5, mid_y, buttons=1, button="left")
            browser.mouse("mouseMoved", box["x"] + box["w"] * 0.6, mid_y, buttons=1, button="left")
            browser.mouse("mouseReleased", box["x"] + box["w"] * 0.6, mid_y, buttons=0, button="left", clicks=1)
            after = browser.evaluate("(() => { const d = document.getElementById('%s').dataset; "
                                     "return {zoomed: d.zoomed, x: [Number(d.x0), Number(d.x1)], "
                                     "drawn: Number(d.drawn)}; })()" % box["id"])
            span_before = before[1] - before[0]
            span_after = after["x"][1] - after["x"][0]
            if (after["zoomed"] != "1" or not 0.15 * span_before < span_after < 0.25 * span_before or
                    after["drawn"] <= 0):
                fail("drag did not zoom to a fifth: before %s, after %s" % (before, after))
            browser.evaluate("document.querySelector('#%s .toolbar button').click()" % box["id"])
            reset = browser.evaluate("document.getElementById('%s').dataset.zoomed" % box["id"])
            if reset != "0":
                fail("reset zoom left zoomed=%s" % reset)

            # Hover over the first pool strip: the block or blocks under the mouse.
            pool = browser.evaluate(
                "(() => { const c = document.querySelector('[data-chart=pool]'); c.scrollIntoView(); "
                "const r = c.querySelector('rect[cursor=crosshair]').getBoundingClientRect(); "
                "return {x: r.left, y: r.top, w: r.width, id: c.id}; })()")
            browser.mouse("mouseMoved", pool["x"] + 3, pool["y"] + 8)
            text = browser.evaluate("document.querySelector('#%s .tooltip').textContent" % pool["id"])
            if "block" not in text:
                fail("no block in the pool tooltip: %r" % text)
            browser.mouse("mouseMoved", 1, 1)

            browser.evaluate("window.scrollTo(0, 0)")
            browser.screenshot(args.screenshot, full_page=args.full_page)

            problems = problems_in(browser.events)
            if problems:
                fail("the page reported problems:\n  " + "\n  ".join(problems))
        finally:
            browser.close()
        elapsed = time.monotonic() - started
        print("ok: %d charts drew, no console errors, screenshot %s (%.1f s)"
              % (len(charts), args.screenshot, elapsed))
        if elapsed > DEADLINE_S:
            fail("took %.1f s, over the %d s budget" % (elapsed, DEADLINE_S))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
