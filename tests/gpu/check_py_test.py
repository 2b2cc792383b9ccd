#!/usr/bin/env python3
"""gpu/check.py's residency, caffe and peak commands, on files laid out as
run.sh's parts leave them on a GPU machine: the figures come out, and a run
that lost its losses, broke its budget or failed makes the part fail."""
import json
import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(sys.argv[1], "gpu", "check.py")


def check(*args):
    r = subprocess.run([sys.executable, CHECK, *args], capture_output=True, text=True)
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip().startswith("{") else r.stdout.strip())


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def train_line(losses, step_ms, kernels=None):
    return "some log line\n" + json.dumps({"losses": [float.hex(v) for v in losses], "losses_decimal": losses,
                                            "step_ms_median": step_ms, "torch_version": "2.x",
                                            "kernels_per_step": kernels}) + "\n"


def report(peak, limit=0, launches=None, **moves):
    return json.dumps({"launches": launches or {"scanned": 0, "naming_blocks": 0},
                       "devices": [{"peak_reserved_bytes": peak, "device_limit_bytes": limit, **moves}]})


def residency_dir(d, learn_losses, learn_peak):
    losses = [2.5, 2.25, 2.0]
    for model in ("gpt", "resnet50"):
        write(f"{d}/{model}.native.out", train_line(losses, 100.0, kernels=160))
        write(f"{d}/{model}.none.out", train_line(losses, 101.0))
        write(f"{d}/{model}.none.rc", "0\n")
        write(f"{d}/{model}.none.report.json", report(1000))
        for share, limit in (("50", 500), ("33", 330)):
            for mode in ("off", "launch", "learn"):
                run = learn_losses if mode == "learn" else losses
                write(f"{d}/{model}.{share}.{mode}.out", train_line(run, 150.0))
                write(f"{d}/{model}.{share}.{mode}.rc", "0\n")
                peak = learn_peak if mode == "learn" else limit
                write(f"{d}/{model}.{share}.{mode}.report.json",
                      report(peak, limit, launches={"scanned": 480, "naming_blocks": 450, "unread": 30},
                             evicted_bytes=3000, prefetched_bytes=3000, pin_calls=4, residency_wait_ms=60))
        write(f"{d}/{model}.33.launch_auto.out", train_line(losses, 150.0))
        write(f"{d}/{model}.33.launch_auto.rc", "0\n")
        write(f"{d}/{model}.33.launch_auto.report.json", report(330, 330, evicted_bytes=3000))
        write(f"{d}/{model}.50.pluggable.out", train_line(losses, 140.0))
        write(f"{d}/{model}.50.pluggable.rc", "0\n")
        write(f"{d}/{model}.50.pluggable.report.json", report(450, 500))


def main():
    with tempfile.TemporaryDirectory() as d:
        assert check("peak", f"{d}/missing.json")[0] == 1
        write(f"{d}/r.json", report(123456))
        assert check("peak", f"{d}/r.json") == (0, "123456"), check("peak", f"{d}/r.json")

    with tempfile.TemporaryDirectory() as d:
        residency_dir(d, [2.5, 2.25, 2.0], 300)
        rc, figures = check("residency", d, "3")
        assert rc == 0, figures
        row = figures["resnet50"]["runs"]["50.learn"]
        assert row["losses_exact"] and row["step_time_vs_native"] == 1.5, row
        assert row["evicted_bytes_per_step"] == 1000 and row["pin_calls"] == 4, row
        assert row["residency_wait_ms_per_step"] == 20, row
        assert figures["gpt"]["launch_visibility"] == {"kernels_per_step": 160, "scanned_per_step": 160,
                                                       "naming_blocks_per_step": 150,
                                                       "unread_per_step": 10}, figures["gpt"]
        assert set(figures["gpt"]["runs"]) == {"none", "50.off", "50.launch", "50.learn", "33.off", "33.launch",
                                               "33.learn", "33.launch_auto", "50.pluggable"}, figures["gpt"]["runs"]
    with tempfile.TemporaryDirectory() as d:  # no unconstrained peak: only native and none ran
        residency_dir(d, [2.5, 2.25, 2.0], 300)
        for path in os.listdir(d):
            if not path.split(".")[1] in ("native", "none"):
                os.remove(os.path.join(d, path))
        rc, figures = check("residency", d, "3")
        assert rc == 1 and figures["gpt"]["runs"]["33.learn"] == {"status": "not run"}, figures
    with tempfile.TemporaryDirectory() as d:
        residency_dir(d, [2.5, 2.3, 2.0], 300)  # learn changed a loss
        rc, figures = check("residency", d, "3")
        assert rc == 1 and not figures["gpt"]["runs"]["50.learn"]["losses_exact"], figures
    with tempfile.TemporaryDirectory() as d:
        residency_dir(d, [2.5, 2.25, 2.0], 600)  # learn held more than the 50% budget
        rc, figures = check("residency", d, "3")
        assert rc == 1 and figures["gpt"]["runs"]["50.learn"]["over_budget"], figures
    with tempfile.TemporaryDirectory() as d:
        residency_dir(d, [2.5, 2.25, 2.0], 300)
        os.remove(f"{d}/gpt.33.off.out")
        write(f"{d}/gpt.33.off.out", "Traceback: CUDA error\n")
        rc, figures = check("residency", d, "3")
        assert rc == 1 and figures["gpt"]["runs"]["33.off"]["status"] == "no result", figures

    with tempfile.TemporaryDirectory() as d:
        losses = "Iteration 0, loss = 2.7\nIteration 1, loss = 2.4\n"
        for name, fb in (("native", 100.0), ("preload", 102.0)):
            write(f"{d}/{name}.rc", "0\n")
            write(f"{d}/{name}/train_losses.txt", losses)
            write(f"{d}/{name}/time_vgg16.log", f"I1126 x] Average Forward-Backward: {fb} ms.\n")
            write(f"{d}/{name}.memory.txt", "500\n4500\n6500\n600\n")
        for name, fb, peak in (("none", 102.0, 6000), ("65", 110.0, 3900), ("50", 125.0, 3000)):
            write(f"{d}/vgg.{name}.rc", "0\n")
            write(f"{d}/vgg.{name}.log", f"Average Forward pass: 40 ms.\nAverage Forward-Backward: {fb} ms.\n")
            write(f"{d}/vgg.{name}.report.json", report(peak, 0, evicted_bytes=10))
        for name, fb in (("native1", 8.4), ("preload", 10.5), ("passthrough", 8.6), ("native2", 8.2)):
            write(f"{d}/lenet.{name}.rc", "0\n")
            write(f"{d}/lenet.{name}.log", f"I1126 x] Average Forward-Backward: {fb} ms.\n")
        rc, figures = check("caffe", d)
        assert rc == 0, figures
        assert figures["lenet_losses_exact"] and abs(figures["vgg16_time_vs_native"] - 1.02) < 1e-9, figures
        split = figures["lenet_split"]
        assert "nobarrier" not in split and abs(split["preload"]["vs_native"] - 10.5 / 8.2) < 1e-9, split
        assert abs(split["passthrough"]["vs_native"] - 8.6 / 8.2) < 1e-9, split
        assert figures["runs"]["native"]["device_bytes_peak"] == 6000 * 1024 * 1024, figures
        b50 = figures["vgg16_budgets"]["50"]
        assert abs(b50["memory_saved"] - 0.5) < 1e-9 and abs(b50["time_cost"] - 23 / 102) < 1e-9, b50
        write(f"{d}/preload/train_losses.txt", "Iteration 0, loss = 2.7\nIteration 1, loss = 2.5\n")
        rc, figures = check("caffe", d)
        assert rc == 1 and not figures["lenet_losses_exact"], figures
        write(f"{d}/preload/train_losses.txt", losses)
        assert check("caffe", d)[0] == 0
        for name in ("65", "50"):  # no peak: no budget run, nothing tested
            os.remove(f"{d}/vgg.{name}.log")
        assert check("caffe", d)[0] == 1
    def graphs_dir(d, preload_graph, tidepool_captured, preload_rc="0"):
        eager, graph = ["0x1.4p+1", "0x1.2p+1"], ["0x1.4p+1", "0x1.1p+1"]
        for name in ("native", "native_nocache", "preload", "preload_nocache", "tidepool"):
            captured = not name.endswith("nocache") and (name != "tidepool" or tidepool_captured)
            line = {"eager_losses": eager, "captured": captured}
            if captured:
                line["graph_losses"] = preload_graph if name == "preload" else graph
            else:
                line["error"] = "RuntimeError: not supported"
            write(f"{d}/{name}.out", json.dumps(line) + "\n")
            write(f"{d}/{name}.rc", (preload_rc if name == "preload" else "0") + "\n")
        return graph

    with tempfile.TemporaryDirectory() as d:
        graph = graphs_dir(d, ["0x1.4p+1", "0x1.1p+1"], tidepool_captured=False)
        rc, figures = check("graphs", d)
        assert rc == 0 and figures["tidepool"]["as_native"] and figures["preload_nocache"]["as_native"], figures
        # Without PyTorch's cache native cannot capture; a preload that can is not as native.
        write(f"{d}/preload_nocache.out", json.dumps({"eager_losses": ["0x1.4p+1", "0x1.2p+1"], "captured": True,
                                                      "graph_losses": graph}) + "\n")
        rc, figures = check("graphs", d)
        assert rc == 1 and "note" in figures["preload_nocache"], figures
    with tempfile.TemporaryDirectory() as d:
        graphs_dir(d, ["0x1.4p+1", "0x1.0p+1"], tidepool_captured=True)  # a replay under the preload differs
        rc, figures = check("graphs", d)
        assert rc == 1 and not figures["preload"]["as_native"], figures
    with tempfile.TemporaryDirectory() as d:
        graphs_dir(d, graph, tidepool_captured=True, preload_rc="139")  # crashed
        rc, figures = check("graphs", d)
        assert rc == 1 and not figures["preload"]["no_crash"], figures

    with tempfile.TemporaryDirectory() as d:  # train: tidepool against each peer
        for mode, ms, used in (("native", 100.0, 8e9), ("preload", 98.0, 6e9), ("tidepool", 99.0, 6.2e9),
                               ("expandable", 101.0, 7e9), ("async", 105.0, 7.5e9)):
            line = json.loads(train_line([2.5, 2.0], ms).splitlines()[1])
            for model in ("gpt", "resnet50"):
                # resnet50 has NVML's figures; the gpt only cuMemGetInfo's, which
                # under the preload shows live bytes (here a tenth of the pool's).
                line["peak_used_bytes_device"] = used if model == "resnet50" else None
                line["peak_used_bytes_meminfo"] = used / 10 if mode == "preload" else used
                write(f"{d}/{model}.{mode}.out", json.dumps(line) + "\n")
        owners = [{"library": "libc10_cuda.so", "owner": "framework", "live_at_peak_bytes": 5000},
                  {"library": "libcublasLt.so.12", "owner": "cuBLAS", "live_at_peak_bytes": 32},
                  {"library": None, "owner": "not known", "live_at_peak_bytes": 1}]
        write(f"{d}/resnet50.preload.report.json",
              json.dumps({"devices": [{"peak_reserved_bytes": 6e9, "owners": owners}]}))
        # free_barrier:off on resnet50 only (older results have none).
        line = json.loads(train_line([2.5, 2.0], 97.0).splitlines()[1])
        write(f"{d}/resnet50.preload_nobarrier.out", json.dumps(line) + "\n")
        write(f"{d}/resnet50.preload_nobarrier.report.json", json.dumps({"devices": [{"peak_reserved_bytes": 5.9e9}]}))
        line = json.loads(train_line([2.5, 2.0], 101.0).splitlines()[1])  # under PyTorch's cache, gpt only
        write(f"{d}/gpt.preload_cached.out", json.dumps(line) + "\n")
        rc, figures = check("train", d)
        assert rc == 0, figures
        assert abs(figures["gpt"]["preload_cached"]["step_time_vs_native"] - 1.01) < 1e-9, figures["gpt"]
        assert "preload_cached" not in figures["resnet50"], figures["resnet50"]
        assert figures["resnet50"]["preload"]["owners_at_peak"] == [
            ["libc10_cuda.so", "framework", 5000], ["libcublasLt.so.12", "cuBLAS", 32], ["not known", "not known", 1]], \
            figures["resnet50"]["preload"]
        assert figures["gpt"]["preload"]["owners_at_peak"] is None, "no report: no owners"
        vs = figures["resnet50"]["preload"]
        assert abs(vs["vs_expandable"]["peak_used"] - 6 / 7) < 1e-9 and abs(vs["vs_async"]["step_time"] - 98 / 105) < 1e-9, vs
        assert figures["gpt"]["expandable"]["step_ms_median"] == 101.0, figures["gpt"]
        assert figures["gpt"]["preload"]["vs_native"]["peak_used"] is None, "no NVML: no preloaded memory ratio"
        off = figures["resnet50"]["preload"]["vs_free_barrier_off"]
        assert abs(off["peak_reserved"] - 6 / 5.9) < 1e-9 and abs(off["step_time"] - 98 / 97) < 1e-9, off
        assert "vs_free_barrier_off" not in figures["gpt"]["preload"], figures["gpt"]["preload"]
        assert abs(figures["gpt"]["tidepool"]["vs_native"]["peak_used"] - 6.2 / 8) < 1e-9, figures["gpt"]["tidepool"]

    def hotpath_dir(d, with_stream_ns):
        write(f"{d}/native.out", json.dumps({"cudaMalloc_ns": 70000.0, "cudaMallocAsync_ns": 1200.0,
                                             "tidepool_capi_ns": 430.0}) + "\n")
        write(f"{d}/preload.out", "noise\n" + json.dumps({"cudaMalloc_ns": 200.0, "cuMemAlloc_ns": 120.0,
                                                          "cudaMalloc_with_stream_ns": with_stream_ns,
                                                          "cudaMallocAsync_ns": 220.0}) + "\n")
        write(f"{d}/python.out", json.dumps({"torch_caching_ns": 2000.0, "tidepool_ctypes_ns": 1800.0}) + "\n")

    for with_stream_ns, met in ((700.0, False), (400.0, True)):
        with tempfile.TemporaryDirectory() as d:  # the goal: both cudaFree-style pairs, whatever the other rows
            hotpath_dir(d, with_stream_ns)
            rc, figures = check("hotpath", d)
            assert rc == 0 and figures["goal_3x_met"] == met, figures
            assert set(figures["goal_3x_pairs"]) == {"speedup_preload_vs_best_c",
                                                     "speedup_preload_with_stream_vs_best_c"}, figures
            assert abs(figures["speedup_preload_vs_best_c"] - 6.0) < 1e-9, figures
            assert figures["speedup_ctypes_vs_best_python"] < 3, "a row outside the goal below 3x"

    def ipc_dir(d, runs):  # name: (rc, JSON line or None)
        for name, (rc, line) in runs.items():
            write(f"{d}/{name}.rc", f"{rc}\n")
            write(f"{d}/{name}.out", "" if line is None else json.dumps(line) + "\n")

    saw = {"big": 1.5, "small": 2.5, "view": 3.5}
    good = {"consumer_saw": saw, "consumer_saw_ours": True, "we_see_its_writes": True,
            "its_view_kept_after_our_free": True, "consumer_exit": 0, "ok": True}
    refused = {"ok": False, "share_error": "invalid device pointer: 0x302000000", "consumer_exit": 0}
    for preload_nocache, passes in (((1, refused), True),  # refuses as native does (PyTorch 2.x)
                                    ((124, None), False),  # hangs where native refused
                                    ((0, good), False)):   # shares where native could not: not native's outcome
        with tempfile.TemporaryDirectory() as d:
            ipc_dir(d, {"native": (0, good), "native_nocache": (1, refused), "preload": (0, good),
                        "preload_nocache": preload_nocache})
            rc, figures = check("ipc", d)
            assert (rc == 0) == passes and figures["preload_nocache"]["as_native"] == passes, (preload_nocache, figures)
            assert figures["preload_nocache"]["against"] == "native_nocache", figures
    with tempfile.TemporaryDirectory() as d:  # where native shares without its cache, the preload must too
        ipc_dir(d, {"native": (0, good), "native_nocache": (0, good), "preload": (0, good),
                    "preload_nocache": (0, dict(good, consumer_saw=dict(saw, big=9.0)))})
        rc, figures = check("ipc", d)
        assert rc == 1 and figures["preload"]["as_native"] and not figures["preload_nocache"]["same_sums_as_native"], figures
    print("ok: check.py residency, caffe, graphs, train, peak, ipc, hotpath")
    return 0


if __name__ == "__main__":
    sys.exit(main())
