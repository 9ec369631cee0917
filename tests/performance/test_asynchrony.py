import math

import torch

from conftest import verdict_of
from d2lrepro.core.results import metric
from d2lrepro.performance import asynchrony
from d2lrepro.pipeline.claims import NOT_APPLICABLE, NOT_REPRODUCED, REPRODUCED

CPU = torch.device("cpu")
ONE_GPU = {"cuda_devices": 1, "usable_cores": 2}


def by_name(rows):
    return {row["metric"]: row for row in rows}


def test_asynchrony_on_cpu(cuda_count):
    cuda_count(0)
    rows = by_name(asynchrony.asynchrony(size=64, steps=2, repeats=1))
    names = ["async.numpy_s"]
    names += ["async.z0", "async.z1"] + [f"async.cuda.{k}" for k in asynchrony.ASYNC_UNITS]
    assert sorted(rows) == sorted(names)
    assert rows["async.numpy_s"]["value"] > 0
    for name in ("async.z0", "async.cuda.sync_s"):
        assert math.isnan(rows[name]["value"]) and rows[name]["note"].startswith("needs CUDA")
    # z = x * y + 2 is the GPU's claim: without one there is nothing to judge.
    assert verdict_of("async.z", list(rows.values())) == NOT_APPLICABLE


def test_z_is_judged_on_what_the_book_code_computes(monkeypatch):
    # The device path runs on the GPU in the workflow; the check is exercised here on the CPU.
    assert verdict_of("async.z", asynchrony.dependency_example(CPU), ONE_GPU) == REPRODUCED
    # Mutation: the inputs made with the wrong initializer.
    monkeypatch.setattr(torch, "ones", torch.zeros)
    rows = asynchrony.dependency_example(CPU)
    assert verdict_of("async.z", rows, ONE_GPU) == NOT_REPRODUCED


def test_queue_memory_needs_cuda(cuda_count):
    cuda_count(0)
    rows = asynchrony.queue_memory()
    assert [r["metric"] for r in rows] == [
        "async.memory.nosync_pinned_bytes",
        "async.memory.sync_pinned_bytes",
    ]
    assert all(math.isnan(r["value"]) and r["note"].startswith("needs CUDA") for r in rows)


class HostAllocator:
    """torch's pinned-memory accounting as held_pinned reads it: a buffer counts as held from
    its allocation until the allocator takes it back, which it does, once the buffer's copies
    are done, at the next allocation."""

    def __init__(self, live: int, done: int):
        self.live, self.done = live, done  # held by the process; copies done, not taken back
        self.peak = live + done

    def stats(self) -> dict:
        return {"active_bytes.current": self.live + self.done, "active_bytes.peak": self.peak}

    def allocate(self, *size, pin_memory=False):
        assert pin_memory
        self.done = 0

    def reset_peak(self):
        self.peak = self.live + self.done

    def hold(self, n: int):
        self.live += n
        self.peak = max(self.peak, self.live + self.done)


def test_only_what_the_loop_holds_at_once_counts(monkeypatch):
    """Held before the loop: 1 MiB by the process, 8 MiB by copies done but not yet taken
    back. The loop holds 3 MiB at once, then 2."""
    host = HostAllocator(live=1 << 20, done=8 << 20)
    monkeypatch.setattr(torch, "empty", host.allocate)
    monkeypatch.setattr(torch.cuda, "host_memory_stats", host.stats)
    monkeypatch.setattr(torch.cuda, "reset_peak_host_memory_stats", host.reset_peak)

    def loop():
        for n in (1 << 20, 2 << 20, -1 << 20):
            host.hold(n)

    assert asynchrony.held_pinned(loop, CPU) == 3 << 20


def memory_rows(nosync: float, sync: float) -> list[dict]:
    return [
        metric("async.memory.nosync_pinned_bytes", nosync, "B", "cuda:0"),
        metric("async.memory.sync_pinned_bytes", sync, "B", "cuda:0"),
    ]


def test_a_queue_holds_more_only_where_copies_were_in_flight_at_once():
    block = 4 << 20  # one product's copy, 1000 x 1000 float32, in a pinned block
    assert verdict_of("async.memory", memory_rows(3 * block, block), ONE_GPU) == REPRODUCED
    # A GPU that finishes each copy before Python queues the next holds one at a time.
    assert verdict_of("async.memory", memory_rows(block, block), ONE_GPU) == NOT_REPRODUCED
    # Copies that land in pageable memory hold no pinned buffer at all.
    assert verdict_of("async.memory", memory_rows(0, 0), ONE_GPU) == NOT_REPRODUCED
    assert verdict_of("async.memory", memory_rows(3 * block, block)) == NOT_APPLICABLE
