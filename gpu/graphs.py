#!/usr/bin/env python3
"""gpu/graphs.py: CUDA graphs under tidepool, one JSON line out.

  graphs.py --mode native|preload|tidepool [--conf TIDEPOOL_CONF]

Captures a small MLP's training step (forward, backward, optimizer step on
static tensors) with torch.cuda.graph, replays it 10 times on fixed inputs,
then runs the same steps eagerly from the same start; prints both loss
series (float.hex) and whether the capture worked. run.sh compares the
modes: each must work, or fail as native fails; never crash or differ.
Fixed seed, deterministic algorithms. As PyTorch documents whole-network
capture: the model and optimizer are warmed up on a side stream, then the
step is captured; here the weights are put back after the warm-up, so the
replays start where the eager run did.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["native", "preload", "tidepool"], required=True)
    ap.add_argument("--conf", default=None)
    args = ap.parse_args()
    if args.mode == "tidepool":
        import tidepool.torch
        tidepool.torch.use(args.conf)
    import torch

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)

    def make():
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        return net, opt

    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(64, 512, generator=gen).cuda(), torch.randint(0, 10, (64,), generator=gen).cuda())
               for _ in range(10)]
    loss_fn = torch.nn.CrossEntropyLoss()
    result = {"mode": args.mode, "torch_version": torch.__version__}

    # Eager reference.
    net, opt = make()
    eager = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        eager.append(loss.item())
    result["eager_losses"] = [float.hex(v) for v in eager]

    # Captured: warm up on a side stream, capture one step, replay per batch.
    try:
        net, opt = make()
        start = [p.detach().clone() for p in net.parameters()]
        static_x = batches[0][0].clone()
        static_y = batches[0][1].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                loss_fn(net(static_x), static_y).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        with torch.no_grad():  # the warm-up's steps undone (SGD without momentum keeps no state)
            for p, p0 in zip(net.parameters(), start):
                p.copy_(p0)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)  # the gradients are the graph's: each replay writes them afresh
        with torch.cuda.graph(graph):
            static_loss = loss_fn(net(static_x), static_y)
            static_loss.backward()
            opt.step()
        # The capture ran nothing: weights are as made. Replays run the steps.
        graphed = []
        for x, y in batches:
            static_x.copy_(x)
            static_y.copy_(y)
            graph.replay()
            graphed.append(static_loss.item())
        torch.cuda.synchronize()
        result["captured"] = True
        result["graph_losses"] = [float.hex(v) for v in graphed]
    except Exception as e:  # noqa: BLE001: a failure is a result here, compared with native's
        result["captured"] = False
        result["error"] = f"{type(e).__name__}: {e}"[:300]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
