"""Asynchronous computation (``async.*``): numpy vs torch with and without synchronization,
z = x * y + 2 on the GPU, and the pinned host memory that the copies of an unsynchronized CUDA
queue hold.

Metrics: ``async.numpy_s`` and ``async.numpy_iqr_s``; ``async.cuda.{nosync,sync}_s``
(medians), their ``_iqr_s`` and ``nosync_over_sync``; ``async.z0``, ``async.z1`` (on the GPU,
as in the book); ``async.memory.{nosync,sync}_copies_in_flight``.
"""

from __future__ import annotations

import statistics

import numpy as np
import torch

from d2lrepro.core.devices import synchronize, unavailable
from d2lrepro.core.results import iqr, metric, not_applicable
from d2lrepro.core.timing import naive_time

ASYNC_UNITS = {
    "nosync_s": "s",
    "sync_s": "s",
    "nosync_iqr_s": "s",
    "sync_iqr_s": "s",
    "nosync_over_sync": "x",
}


def _alternated(names, loops, device, sync, repeats: int) -> dict[str, float]:
    """``{name}_s`` and ``{name}_iqr_s``: median and IQR of ``repeats`` book-style single runs
    of each loop (``sync``: whether its clock waits for ``device``), the loops alternated so
    that all see the same load from whatever else runs on the machine."""
    runs = [
        [naive_time(loop, device, wait) for loop, wait in zip(loops, sync)] for _ in range(repeats)
    ]
    timings = {}
    for name, times in zip(names, zip(*runs)):
        timings |= {f"{name}_s": statistics.median(times), f"{name}_iqr_s": iqr(times)}
    return timings


def _torch_async(device: torch.device, size: int, steps: int, repeats: int) -> dict[str, float]:
    """The book's loop timed without and with synchronizing ``device`` at the end."""

    def loop():
        for _ in range(steps):
            a = torch.randn(size, size, device=device)
            torch.mm(a, a)

    loop()  # the book's warm-up
    timings = _alternated(("nosync", "sync"), (loop, loop), device, (False, True), repeats)
    return timings | {"nosync_over_sync": timings["nosync_s"] / timings["sync_s"]}


def dependency_example(device: torch.device) -> list[dict]:
    """The book's z = x * y + 2 on ones, computed on ``device``."""
    x = torch.ones((1, 2), device=device)
    y = torch.ones((1, 2), device=device)
    z = (x * y + 2).cpu()
    return [metric(f"async.z{j}", z[0, j].item(), "", str(device)) for j in (0, 1)]


def asynchrony(size: int = 1000, steps: int = 10, repeats: int = 3, seed: int = 0) -> list[dict]:
    """The book's numpy vs torch benchmark: ``steps`` times a ``size``² normal matrix and its
    square, with numpy on the CPU, then with torch on CUDA without and with synchronization
    (each the median of ``repeats`` book-style single runs), and z = x * y + 2 on the GPU."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)

    def numpy_loop():
        for _ in range(steps):
            a = rng.normal(size=(size, size))
            np.dot(a, a)

    times = [naive_time(numpy_loop, "cpu", False) for _ in range(repeats)]
    rows = [
        metric("async.numpy_s", statistics.median(times), "s", "cpu"),
        metric("async.numpy_iqr_s", iqr(times), "s", "cpu"),
    ]
    reason = unavailable(cuda=1)
    if reason:
        return (
            rows
            + [not_applicable(f"async.z{j}", reason) for j in (0, 1)]
            + [not_applicable(f"async.cuda.{k}", reason, unit) for k, unit in ASYNC_UNITS.items()]
        )
    cuda = torch.device("cuda", 0)
    return (
        rows
        + dependency_example(cuda)
        + [
            metric(f"async.cuda.{k}", v, ASYNC_UNITS[k], str(cuda))
            for k, v in _torch_async(cuda, size, steps, repeats).items()
        ]
    )


def copies_in_flight(step, steps: int, device: torch.device, sync_each: bool) -> int:
    """The most copies to the host in flight at once while ``steps`` times ``step()`` queues
    one on ``device``'s current stream (``sync_each``: the device is synchronized after each).
    A CUDA event recorded after each copy completes when the copy does; a copy counts from
    when it is queued until its event has completed, as seen each time the next one is queued
    (``query()``, which never waits). Nothing is read from an allocator's counters."""
    stream = torch.cuda.current_stream(device)
    pending: list[torch.cuda.Event] = []
    most = 0
    for _ in range(steps):
        step()
        done = torch.cuda.Event()
        done.record(stream)
        pending = [event for event in pending if not event.query()] + [done]
        most = max(most, len(pending))
        if sync_each:
            synchronize(device)
    synchronize(device)
    return most


def queue_memory(size: int = 1000, steps: int = 10) -> list[dict]:
    """A PyTorch analogue of the blog notes' warning that asynchrony takes more memory: the
    book's loop (``steps`` products of a fresh ``size``² normal matrix), each product copied
    to the host without blocking and dropped at once, as a loop that logs its results does,
    run never synchronized and synchronized every step. Such a copy lands in pinned host
    memory, a block of the product's size that torch's host allocator does not hand out again
    until the copy is done; so the copies in flight at once (:func:`copies_in_flight`) are the
    pinned blocks the loop holds. A warm-up run comes first, as the book warms up its device."""
    names = {
        False: "async.memory.nosync_copies_in_flight",
        True: "async.memory.sync_copies_in_flight",
    }
    reason = unavailable(cuda=1)
    if reason:
        return [not_applicable(name, reason) for name in names.values()]
    device = torch.device("cuda", 0)

    def step() -> None:
        a = torch.randn(size, size, device=device)
        torch.mm(a, a).to("cpu", non_blocking=True)

    copies_in_flight(step, steps, device, sync_each=False)
    held = {s: copies_in_flight(step, steps, device, sync_each=s) for s in names}
    return [metric(names[s], held[s], "", str(device)) for s in (False, True)]


def measure(cfg: dict, seed: int) -> list[dict]:
    """Every measurement of the section with the ``asynchrony`` config."""
    rows = asynchrony(cfg["size"], cfg["steps"], cfg["repeats"], seed)
    return rows + queue_memory(cfg["size"], cfg["steps"])
