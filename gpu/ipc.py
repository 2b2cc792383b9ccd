"""CUDA tensors shared between processes by torch.multiprocessing (gpu/run.sh's
ipc part), natively and under the preload: a producer fills tensors (a large
one, a small one, and a view that starts inside its storage), a spawned
consumer receives them through CUDA IPC handles, sums them and adds 1 to
every element in place; the producer checks that it sees the consumer's
writes, then drops its own references and allocates the same sizes again
while the consumer still holds the tensors, and the consumer checks that its
view did not change. Prints one JSON line; exit 0 when every check held.

The tensors are pickled here, not in the queue's feeder thread, so that a
tensor PyTorch cannot share (without its caching allocator, PyTorch 2.x
refuses with "invalid device pointer", natively too) ends the run at once
with `share_error`, rather than leaving the producer waiting for a consumer
that never hears from it.
"""
import json
import sys

import torch
import torch.multiprocessing as mp
from multiprocessing.reduction import ForkingPickler

SIZES = {"big": (16 << 20,), "small": (1000,), "matrix": (4096, 256)}


def sums(tensors):
    return {k: float(v.double().sum().item()) for k, v in tensors.items()}


def consumer(to_consumer, to_producer):
    message = to_consumer.get()
    if isinstance(message, str):  # the producer could not share its tensors
        return
    tensors = ForkingPickler.loads(message)
    seen = sums(tensors)
    for v in tensors.values():
        v.add_(1)
    torch.cuda.synchronize()
    to_producer.put(seen)
    to_consumer.get()  # the producer has dropped its references and churned
    to_producer.put(sums(tensors))
    del tensors
    to_consumer.get()


def receive(queue, child, seconds=120):
    """The consumer's next answer; None at once if it has died (a crash
    under the preload must not cost the GPU machine two minutes)."""
    import queue as queues
    for _ in range(seconds):
        try:
            return queue.get(timeout=1)
        except queues.Empty:
            if not child.is_alive():
                return None
    return None


def failed(child, why):
    child.join(5)
    if child.is_alive():
        child.kill()
    print(json.dumps({"ok": False, "error": why, "consumer_exit": child.exitcode}), flush=True)
    return 1


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
    try:
        message = bytes(ForkingPickler.dumps(tensors))
    except RuntimeError as e:
        to_consumer.put("abort")
        child.join(60)
        print(json.dumps({"ok": False, "share_error": str(e).splitlines()[0], "consumer_exit": child.exitcode}),
              flush=True)
        return 1
    to_consumer.put(message)
    consumer_saw = receive(to_producer, child)
    if consumer_saw is None:
        return failed(child, "no answer from the consumer after it received the tensors")
    torch.cuda.synchronize()
    after_writes = sums(tensors)
    del tensors
    churn = []
    for i in range(4):
        churn.append({k: torch.full(shape, float(i), device="cuda") for k, shape in SIZES.items()})
    torch.cuda.synchronize()
    to_consumer.put("freed")
    consumer_after = receive(to_producer, child)
    if consumer_after is None:
        return failed(child, "no answer from the consumer after the producer freed its tensors")
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
