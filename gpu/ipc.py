"""CUDA tensors shared between processes by torch.multiprocessing (gpu/run.sh's
ipc part), natively and under the preload: a producer fills tensors (a large
one, a small one, and a view that starts inside its storage), a spawned
consumer receives them through CUDA IPC handles, sums them and adds 1 to
every element in place; the producer checks that it sees the consumer's
writes, then drops its own references and allocates the same sizes again
while the consumer still holds the tensors, and the consumer checks that its
view did not change. Prints one JSON line; exit 0 when every check held.
"""
import json
import sys

import torch
import torch.multiprocessing as mp

SIZES = {"big": (16 << 20,), "small": (1000,), "matrix": (4096, 256)}


def sums(tensors):
    return {k: float(v.double().sum().item()) for k, v in tensors.items()}


def consumer(to_consumer, to_producer):
    tensors = to_consumer.get()
    seen = sums(tensors)
    for v in tensors.values():
        v.add_(1)
    torch.cuda.synchronize()
    to_producer.put(seen)
    to_consumer.get()  # the producer has dropped its references and churned
    to_producer.put(sums(tensors))
    del tensors
    to_consumer.get()


def main():
    ctx = mp.get_context("spawn")
    to_consumer, to_producer = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=consumer, args=(to_consumer, to_producer))
    child.start()
    g = torch.Generator(device="cuda").manual_seed(0)
    tensors = {k: torch.randn(*shape, device="cuda", generator=g) for k, shape in SIZES.items()}
    tensors["view"] = tensors.pop("matrix")[100:200]  # shared with its storage offset
    before = sums(tensors)
    numels = {k: v.numel() for k, v in tensors.items()}
    to_consumer.put(tensors)
    consumer_saw = to_producer.get(timeout=120)
    torch.cuda.synchronize()
    after_writes = sums(tensors)
    del tensors
    churn = []
    for i in range(4):
        churn.append({k: torch.full(shape, float(i), device="cuda") for k, shape in SIZES.items()})
    torch.cuda.synchronize()
    to_consumer.put("freed")
    consumer_after = to_producer.get(timeout=120)
    to_consumer.put("done")
    child.join(60)
    result = {
        "consumer_saw": consumer_saw,
        "consumer_saw_ours": all(abs(consumer_saw[k] - before[k]) <= 1e-6 * max(1.0, abs(before[k])) for k in before),
        "we_see_its_writes": all(abs(after_writes[k] - (before[k] + numels[k])) <= 1e-3 * max(1.0, abs(before[k]))
                                 for k in before),
        "its_view_kept_after_our_free": all(abs(consumer_after[k] - after_writes[k]) <= 1e-6 * max(1.0, abs(after_writes[k]))
                                            for k in before),
        "consumer_exit": child.exitcode,
    }
    result["ok"] = (result["consumer_saw_ours"] and result["we_see_its_writes"] and
                    result["its_view_kept_after_our_free"] and child.exitcode == 0)
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
