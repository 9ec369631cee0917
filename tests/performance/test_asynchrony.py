import math

import pytest
import torch

from conftest import verdict_of
from d2lrepro.core.results import metric
from d2lrepro.performance import asynchrony
from d2lrepro.pipeline.claims import NOT_APPLICABLE, NOT_REPRODUCED, OBSERVED, REPRODUCED

CPU = torch.device("cpu")
ONE_GPU = {"cuda_devices": 1, "usable_cores": 2}


def by_name(rows):
    return {row["metric"]: row for row in rows}


def test_asynchrony_on_cpu(cuda_count):
    cuda_count(0)
    rows = by_name(asynchrony.asynchrony(size=64, steps=2, repeats=1))
    names = ["async.numpy_s", "async.numpy_iqr_s"]
    names += ["async.z0", "async.z1"] + [f"async.cuda.{k}" for k in asynchrony.ASYNC_UNITS]
    assert sorted(rows) == sorted(names)
    assert rows["async.numpy_s"]["value"] > 0
    assert rows["async.numpy_iqr_s"]["value"] == 0  # one repeat: no spread
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
        "async.memory.nosync_copies_in_flight",
        "async.memory.sync_copies_in_flight",
    ]
    assert all(math.isnan(r["value"]) and r["note"].startswith("needs CUDA") for r in rows)


class SlowQueue:
    """A GPU that finishes each queued copy ``lag`` steps after it was queued, or at once
    when synchronized; its events are CUDA events as copies_in_flight uses them."""

    def __init__(self, lag: int):
        self.lag, self.now = lag, 0
        queue = self

        class Event:
            def record(self, stream=None):
                self.done_at = queue.now + queue.lag

            def query(self):
                return queue.now >= self.done_at

        self.Event = Event

    def step(self):
        self.now += 1

    def synchronize(self, device=None):
        self.now += self.lag


@pytest.mark.parametrize("lag, held", [(0, 1), (1, 1), (2, 2), (3, 3), (20, 10)])
def test_copies_count_from_queued_until_their_event_completes(monkeypatch, lag, held):
    gpu = SlowQueue(lag)
    monkeypatch.setattr(torch.cuda, "Event", gpu.Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(asynchrony, "synchronize", gpu.synchronize)
    assert asynchrony.copies_in_flight(gpu.step, 10, CPU, sync_each=False) == held
    # Synchronized after every step, only the copy just queued is ever in flight.
    assert asynchrony.copies_in_flight(gpu.step, 10, CPU, sync_each=True) == 1


def memory_rows(nosync: float, sync: float) -> list[dict]:
    return [
        metric("async.memory.nosync_copies_in_flight", nosync, "", "cuda:0"),
        metric("async.memory.sync_copies_in_flight", sync, "", "cuda:0"),
    ]


def test_a_queue_holds_more_only_where_copies_were_in_flight_at_once():
    assert verdict_of("async.memory", memory_rows(3, 1), ONE_GPU) == REPRODUCED
    # A GPU that finishes each copy before Python queues the next holds one at a time.
    assert verdict_of("async.memory", memory_rows(1, 1), ONE_GPU) == NOT_REPRODUCED
    # A count of no copies at all is a broken measurement, not a synchronized queue.
    assert verdict_of("async.memory", memory_rows(3, 0), ONE_GPU) == NOT_REPRODUCED
    # Counted where the job had no GPU, it is an observation of this machine.
    assert verdict_of("async.memory", memory_rows(3, 1)) == OBSERVED
