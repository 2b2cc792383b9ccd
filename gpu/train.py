#!/usr/bin/env python3
"""gpu/train.py: a short deterministic PyTorch training run, one JSON line out.

  train.py --model resnet50|gpt --mode native|preload|tidepool [--steps N]
           [--conf TIDEPOOL_CONF] [--snapshot PATH] [--count-kernels]

native and preload run the same code (run.sh sets LD_PRELOAD and
PYTORCH_NO_CUDA_MEMORY_CACHING=1 for preload); tidepool calls
tidepool.torch.use(conf) first. Fixed seed, deterministic algorithms, random
data drawn on the host. Prints the loss at every step (float.hex, exact),
the median step time, and peak device use: through NVML (the device's used
memory, which no preloaded hook can change; None without pynvml), through
cuMemGetInfo (torch.cuda.mem_get_info: under the preload that counts the
pool's idle bytes as free, so it is the program's live bytes, not what the
pool holds) and torch.cuda.max_memory_reserved. --snapshot
records torch.cuda.memory._record_memory_history and dumps it there.
--count-kernels runs one more step under torch.profiler and reports how many
GPU kernels it ran (kernels_per_step), to set against the launches tidepool's
hooks saw.
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def device_used(torch):
    """A function giving the device's used bytes from NVML, or None without pynvml."""
    try:
        import pynvml
        pynvml.nvmlInit()
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        try:
            bus = "%08x:%02x:%02x.0" % (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
        except Exception:
            handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        pynvml.nvmlDeviceGetMemoryInfo(handle)  # some setups (vGPU, MIG) refuse it: None then
        return lambda: int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    except Exception:
        return None


def build(model, torch):
    nn = torch.nn
    if model == "resnet50":
        import torchvision
        net = torchvision.models.resnet50(num_classes=1000)
        gen = torch.Generator().manual_seed(1)
        data = [(torch.randn(64, 3, 224, 224, generator=gen), torch.randint(0, 1000, (64,), generator=gen))
                for _ in range(4)]
        return net, data, nn.CrossEntropyLoss(), lambda out, y: (out, y)

    class Gpt(nn.Module):
        def __init__(self, vocab=4096, dim=384, layers=6, heads=6, seq=256):
            super().__init__()
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Parameter(torch.zeros(seq, dim))
            layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
            self.body = nn.TransformerEncoder(layer, layers)
            self.head = nn.Linear(dim, vocab)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

        def forward(self, x):
            h = self.tok(x) + self.pos[: x.shape[1]]
            return self.head(self.body(h, mask=self.mask, is_causal=True))

    gen = torch.Generator().manual_seed(1)
    data = []
    for _ in range(4):
        tokens = torch.randint(0, 4096, (32, 257), generator=gen)
        data.append((tokens[:, :-1], tokens[:, 1:]))
    return Gpt(), data, nn.CrossEntropyLoss(), lambda out, y: (out.reshape(-1, out.shape[-1]), y.reshape(-1))


def reserved(torch):
    try:  # a pluggable allocator keeps no statistics
        return torch.cuda.max_memory_reserved()
    except Exception:  # noqa: BLE001
        return None


def one_step(net, opt, loss_fn, shape, x, y):
    opt.zero_grad(set_to_none=True)
    out, target = shape(net(x), y)
    loss = loss_fn(out, target)
    loss.backward()
    opt.step()
    return loss


def count_kernels(torch, step):
    """GPU kernels one step runs, by torch.profiler (copies and sets left out); None when it cannot tell."""
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events()
                   if e.device_type == DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset")))
    except Exception:  # noqa: BLE001
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["resnet50", "gpt"], required=True)
    ap.add_argument("--mode", choices=["native", "preload", "tidepool"], required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--conf", default=None)
    ap.add_argument("--snapshot", default=None)
    ap.add_argument("--count-kernels", action="store_true")
    args = ap.parse_args()

    if args.mode == "tidepool":
        import tidepool.torch
        tidepool.torch.use(args.conf)
    import torch

    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.snapshot:
        try:  # no tracebacks: the events are what the trace needs, and stacks slow the run
            torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                     max_entries=2_000_000)
        except TypeError:
            torch.cuda.memory._record_memory_history(max_entries=2_000_000)

    net, data, loss_fn, shape = build(args.model, torch)
    net = net.cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    data = [(x.cuda(), y.cuda()) for x, y in data]
    free0, total = torch.cuda.mem_get_info()
    losses, times, peak_used = [], [], total - free0
    used_now = device_used(torch)
    peak_device = used_now() if used_now else None
    for step in range(args.steps):
        x, y = data[step % len(data)]
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = one_step(net, opt, loss_fn, shape, x, y)
        losses.append(loss.item())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        free, _ = torch.cuda.mem_get_info()
        peak_used = max(peak_used, total - free)
        if used_now:
            peak_device = max(peak_device, used_now())
    kernels = None
    if args.count_kernels:
        kernels = count_kernels(torch, lambda: one_step(net, opt, loss_fn, shape, *data[0]))
    if args.snapshot:
        torch.cuda.memory._dump_snapshot(args.snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    print(json.dumps({
        "model": args.model, "mode": args.mode, "steps": args.steps,
        "losses": [float.hex(v) for v in losses], "losses_decimal": losses,
        "step_ms_median": 1000 * statistics.median(times[3:] or times),
        "first_step_ms": 1000 * times[0],
        "peak_used_bytes_meminfo": peak_used, "peak_used_bytes_device": peak_device, "total_bytes": total,
        "max_memory_reserved": reserved(torch),
        "kernels_per_step": kernels,
        "torch_version": torch.__version__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
