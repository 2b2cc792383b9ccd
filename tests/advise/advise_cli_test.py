#!/usr/bin/env python3
"""tidepool-advise end to end, on the simulated driver, over advise_trainer.

advise_trainer keeps W MiB of weights and at most (L + 1) x B x S MiB of
activations and gradients at once, plus one 2 MiB page of workspaces, so
the largest batch that fits a budget is known before the advisor runs:
    largest = floor((limit - W - 2 MiB) / ((L + 1) x S)).
Each case checks what the advisor must find or refuse.

usage: advise_cli_test.py CASE TIDEPOOL_ADVISE ADVISE_TRAINER
"""
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from preload_env import preload_env  # noqa: E402

CASE, ADVISE, TRAINER = sys.argv[1], sys.argv[2], sys.argv[3]
WORK = tempfile.mkdtemp(prefix="advise_cli_" + CASE + "_")
atexit.register(shutil.rmtree, WORK, ignore_errors=True)
# The sim commits nothing until touched; room for every batch tried.
ENV = preload_env(ADVISE, TIDEPOOL_SIM_MEMORY="64GiB")


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def largest_fitting(limit_mib, weights_mib=16, layers=4, sample_mib=2):
    return (limit_mib - weights_mib - 2) // ((layers + 1) * sample_mib)


def advise(options, trainer_args=(), timeout=150, expect=0):
    """Runs the advisor; returns (exit status, stdout, stderr, JSON or None)."""
    out_json = os.path.join(WORK, "advice.json")
    if os.path.exists(out_json):
        os.remove(out_json)
    cmd = [ADVISE, "--sim", "--json", out_json] + options + ["--", TRAINER, "--batch", "{batch}",
                                                             "--steps", "{steps}"] + list(trainer_args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV)
    if expect is not None and p.returncode != expect:
        fail("%s exited %d, expected %d\nstdout:\n%s\nstderr:\n%s" % (cmd, p.returncode, expect, p.stdout, p.stderr))
    advice = None
    if os.path.exists(out_json):
        with open(out_json) as f:
            advice = json.load(f)
    return p.returncode, p.stdout, p.stderr, advice


def bad(options, words, needle):
    """A refused command line: exit 2, the reason on stderr, no trial run."""
    start = time.time()
    p = subprocess.run([ADVISE, "--sim"] + options + ["--"] + words, capture_output=True, text=True, timeout=60,
                       env=ENV)
    if p.returncode != 2:
        fail("%s: exit %d, expected 2\n%s" % (options + words, p.returncode, p.stderr))
    if needle not in p.stderr:
        fail("%s: stderr lacks %r:\n%s" % (options + words, needle, p.stderr))
    if "trial 1" in p.stderr:
        fail("%s: a trial ran before the input was refused" % (options + words))
    if time.time() - start > 10:
        fail("%s: refused only after %.1f s" % (options + words, time.time() - start))


def no_trainer_left(tag):
    """No process of the trial's group outlives the advisor."""
    for _ in range(50):
        left = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout.split()
        if not left:
            return
        time.sleep(0.1)
    fail("processes left behind: %s" % left)


def check_trial_limits(advice, limit_bytes):
    for t in advice["trials"]:
        if t["report_found"] and t["peak_reserved_bytes"] > limit_bytes:
            fail("trial %d reserved %d bytes over its limit %d" % (t["trial"], t["peak_reserved_bytes"], limit_bytes))


def case_known_batch():
    # Two shapes, so the answer is not one example's.
    for limit, shape, batch_range in [(140, [], "1:64"), (200, ["--layers", "3", "--sample-mib", "4",
                                                               "--weights-mib", "10"], "3:100")]:
        layers = int(shape[1]) if shape else 4
        sample = int(shape[3]) if shape else 2
        weights = int(shape[5]) if shape else 16
        expected = largest_fitting(limit, weights, layers, sample)
        _, out, _, advice = advise(["--device-limit", "%dMiB" % limit, "--margin", "0", "--no-evict", "--batch",
                                    batch_range], shape)
        got = advice["answer"]["largest_without_eviction"]
        if got is None or got["batch"] != expected:
            fail("limit %d MiB, shape %s: largest batch %s, expected %d" % (limit, shape, got, expected))
        for t in advice["trials"]:
            fits = t["batch"] <= expected
            if (t["outcome"] == "fits") != fits:
                fail("trial at batch %d: %s, expected %s" % (t["batch"], t["outcome"], "fits" if fits else "not"))
            if not fits and t["outcome"] != "out of memory":
                fail("trial at batch %d: %s (%s), expected out of memory" % (t["batch"], t["outcome"], t["reason"]))
            if fits and not (t["step_source"] == "trace" and t["step_s"] > 0 and t["samples_per_s"] > 0):
                fail("trial at batch %d: steps not timed from the trace: %s" % (t["batch"], t))
        check_trial_limits(advice, limit << 20)
        if "largest batch without eviction:    %d" % expected not in out:
            fail("the table does not give the answer:\n" + out)
        if len(advice["trials"]) > 16:
            fail("%d trials for a range of 64: the search is not logarithmic" % len(advice["trials"]))


def case_margin():
    # 10% of 140 MiB kept free: each trial is held to 126 MiB.
    _, _, _, advice = advise(["--device-limit", "140MiB", "--margin", "10", "--no-evict", "--batch", "1:64"])
    expected = largest_fitting(126)
    if advice["answer"]["largest_without_eviction"]["batch"] != expected:
        fail("margin 10%%: largest %s, expected %d" % (advice["answer"]["largest_without_eviction"], expected))
    if advice["budget"]["trial_limit_bytes"] != int(140 * 0.9 * (1 << 20)):
        fail("trial limit %d" % advice["budget"]["trial_limit_bytes"])
    if advice["budget"]["bytes"] != 140 << 20:
        fail("budget %d" % advice["budget"]["bytes"])


def case_eviction():
    _, out, _, advice = advise(["--device-limit", "140MiB", "--margin", "0", "--batch", "1:40",
                                "--base-batch", "8", "--base-lr", "0.1"])
    a = advice["answer"]
    without = largest_fitting(140)
    if a["largest_without_eviction"]["batch"] != without:
        fail("largest without eviction %s, expected %d" % (a["largest_without_eviction"], without))
    if not a["eviction_searched"] or a["largest_with_eviction"] is None:
        fail("eviction was not searched: %s" % a)
    if a["largest_with_eviction"]["batch"] <= without:
        fail("eviction did not raise the largest batch: %s" % a["largest_with_eviction"])
    evicting = [t for t in advice["trials"] if t["eviction"] and t["outcome"] == "fits" and t["batch"] > without]
    if not evicting or any(t["evicted_bytes"] == 0 for t in evicting):
        fail("trials above %d with eviction moved nothing: %s" % (without, evicting))
    check_trial_limits(advice, 140 << 20)
    best = a["best"]
    if best is None or best["samples_per_s"] != max(t["samples_per_s"] for t in advice["trials"]
                                                    if t["outcome"] == "fits"):
        fail("best is not the fastest fitting trial: %s" % best)
    lr = a["largest_with_eviction"]["learning_rate"]
    if abs(lr - 0.1 * a["largest_with_eviction"]["batch"] / 8) > 1e-12:
        fail("learning rate %s not scaled linearly" % lr)
    if "warm" not in a["learning_rate"]["caveat"] or "largest batch with eviction:" not in out:
        fail("the answer lacks the warm-up caveat or the eviction line:\n" + out)


def case_html_and_json():
    html = os.path.join(WORK, "advice.html")
    hostile = "</script><img src=x onerror=alert(1)>"
    p = subprocess.run([ADVISE, "--sim", "--device-limit", "100MiB", "--no-evict", "--batch", "2:16", "--html", html,
                        "--json", os.path.join(WORK, "a.json"), "--", "sh", "-c",
                        'exec "$0" --batch "$1" --steps "$2"', TRAINER, "{batch}", "{steps}", hostile],
                       capture_output=True, text=True, timeout=120, env=ENV)
    if p.returncode != 0:
        fail("exit %d\n%s" % (p.returncode, p.stderr))
    page = open(html).read()
    if hostile in page or "<img" in page:
        fail("the command's text reached the page unescaped")
    data = page.split('<script id="advice-data" type="application/json">', 1)[1].split("</script>", 1)[0]
    advice = json.loads(data)
    if hostile not in advice["command"]:
        fail("the page's data lost the command")
    if advice != json.load(open(os.path.join(WORK, "a.json"))):
        fail("the page's data and --json differ")
    if "http://" in page.replace("http://www.w3.org/2000/svg", "") or "https://" in page:
        fail("the page reaches the network")


def case_marker():
    _, _, _, advice = advise(["--device-limit", "80MiB", "--no-evict", "--batch", "1:8", "--step-marker",
                              "^step [0-9]+$"])
    for t in advice["trials"]:
        if t["outcome"] == "fits" and not (t["step_source"] == "marker" and t["steps"] == 6 and t["step_s"] > 0):
            fail("trial %d not timed by its 6 marker lines: %s" % (t["trial"], t))


def case_bad_input():
    trainer = [TRAINER, "--batch", "{batch}"]
    bad([], [TRAINER, "--batch", "32"], "names no {batch}")
    bad([], [], "no program given")
    bad(["--batch", "10:5"], trainer, "empty range")
    bad(["--batch", "0:5"], trainer, "empty range")
    bad(["--batch", "ten"], trainer, "MIN:MAX")
    bad(["--device-limit", "lots"], trainer, "--device-limit")
    bad(["--device-limit", "1MiB"], trainer, "under 2 MiB")
    bad(["--conf", "device_limit:1GiB"], trainer, "set by tidepool-advise")
    bad(["--conf", "polcy:best_fit"], trainer, "refused")
    bad(["--step-marker", "(unclosed"], trainer, "--step-marker")
    bad(["--base-lr", "0.1"], trainer, "go together")
    bad(["--html", "/no/such/dir/r.html"], trainer, "--html")
    bad(["--frobnicate"], trainer, "frobnicate")


def case_never_allocates():
    code, _, err, advice = advise(["--batch", "1:8"], ["--no-alloc"], expect=2)
    if "no device allocation" not in err:
        fail("a program that never allocates: %s" % err)
    if len(advice["trials"]) != 1:
        fail("the search went on after a program that never allocates")
    # A program that exits at once, without a CUDA call.
    p = subprocess.run([ADVISE, "--sim", "--batch", "1:8", "--", "true", "{batch}"], capture_output=True, text=True,
                       timeout=60, env=ENV)
    if p.returncode != 2 or "no report" not in p.stderr:
        fail("a program that exits at once: exit %d\n%s" % (p.returncode, p.stderr))


def case_failing_program():
    code, _, err, advice = advise(["--device-limit", "140MiB", "--batch", "1:64"], ["--fail-at-batch", "8"], expect=2)
    if "shapes do not match" not in err:
        fail("the program's stderr tail is not shown:\n" + err)
    stopped = advice["answer"]["stopped_by"]
    if stopped is None or stopped["batch"] != 8 or advice["trials"][-1]["batch"] != 8:
        fail("the search did not stop at the failed trial: %s" % stopped)
    # A program that leaves a process outside its group (setsid) and fails
    # with bytes that are not UTF-8: the JSON is still written, exit 2, and
    # nothing is left running.
    out_json = os.path.join(WORK, "broken.json")
    p = subprocess.run([ADVISE, "--sim", "--json", out_json, "--", "sh", "-c",
                        'setsid sleep 300.25 & printf "\\342\\226 broken\\n" >&2; exit 4', "{batch}"],
                       capture_output=True, timeout=60, env=ENV)
    if p.returncode != 2 or not os.path.exists(out_json):
        fail("a failure with non-UTF-8 stderr: exit %d, JSON written: %s\n%s" % (p.returncode,
                                                                               os.path.exists(out_json), p.stderr))
    tail = json.load(open(out_json))["answer"]["stopped_by"]["stderr_tail"]
    if "broken" not in tail:
        fail("the stderr tail was lost: %r" % tail)
    no_trainer_left("sleep 300.25")


def case_timeout():
    tag = "--weights-mib 16.0421"
    start = time.time()
    _, _, _, advice = advise(["--device-limit", "140MiB", "--no-evict", "--batch", "1:16", "--timeout", "2"],
                             ["--hang-at-batch", "4"] + tag.split())
    took = time.time() - start
    if advice["answer"]["largest_without_eviction"]["batch"] != 3:
        fail("with batches from 4 hanging, the largest is %s" % advice["answer"]["largest_without_eviction"])
    timed_out = [t for t in advice["trials"] if t["outcome"] == "timed out"]
    if not timed_out or any(t["wall_s"] > 8 for t in timed_out):
        fail("hanging trials were not killed at their timeout: %s" % timed_out)
    if took > 60:
        fail("the search took %.0f s" % took)
    no_trainer_left("weights-mib 16.0421")


def case_interrupt():
    tag = "--weights-mib 16.0427"
    p = subprocess.Popen([ADVISE, "--sim", "--batch", "1:8", "--timeout", "300", "--", TRAINER, "--batch", "{batch}",
                          "--hang-at-batch", "1"] + tag.split(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=ENV)
    # Wait until the trial's program runs, then interrupt as Ctrl-C would.
    for _ in range(200):
        if subprocess.run(["pgrep", "-f", "weights-mib 16.0427"], capture_output=True).stdout.strip():
            break
        time.sleep(0.05)
    else:
        p.kill()
        fail("the trial's program never started")
    time.sleep(0.3)
    start = time.time()
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("the advisor did not stop on SIGINT")
    if p.returncode != 130:
        fail("exit %d after SIGINT, expected 130\n%s" % (p.returncode, err))
    if time.time() - start > 10:
        fail("stopping took %.1f s" % (time.time() - start))
    no_trainer_left("weights-mib 16.0427")


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}
if CASE not in CASES:
    fail("no case %r; cases: %s" % (CASE, ", ".join(sorted(CASES))))
CASES[CASE]()
print("ok: " + CASE)
