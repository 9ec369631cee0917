"""Asynchronous computation (``async.*``): numpy vs torch with and without synchronization, how
long a CPU operator takes to return against how long until its result is read, z = x * y + 2 on
the GPU, and the peak memory of an unsynchronized CUDA queue.

Metrics: ``async.numpy_s``; ``async.cuda.{nosync,sync}_s`` (medians), their ``_iqr_s`` and
``nosync_over_sync``; ``async.cpu.{return,read}_s`` (medians) and their ``_iqr_s``;
``async.z0``, ``async.z1`` (on the GPU, as in the book); ``async.memory.{nosync,sync}_peak_bytes``.
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
RETURN_UNITS = {"return_s": "s", "read_s": "s", "return_iqr_s": "s", "read_iqr_s": "s"}


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


def operator_return(device: torch.device, size: int, steps: int, repeats: int) -> dict[str, float]:
    """The book's operator, ``steps`` products of a ``size``² normal matrix made beforehand,
    timed until the calls return to Python and until the last product's last entry has been
    read: a synchronous backend has done the work when a call returns, so the two are close;
    an asynchronous one returns first and makes the read wait. (On the CPU synchronizing does
    nothing, so the book's pair, without and with a sync, would time the same code twice.)"""
    a = torch.randn(size, size, device=device)

    def products():
        for _ in range(steps):
            b = torch.mm(a, a)
        return b

    def returned():
        products()

    def read():
        products()[-1, -1].item()

    read()  # the book's warm-up
    return _alternated(("return", "read"), (returned, read), device, (False, False), repeats)


def dependency_example(device: torch.device) -> list[dict]:
    """The book's z = x * y + 2 on ones, computed on ``device``."""
    x = torch.ones((1, 2), device=device)
    y = torch.ones((1, 2), device=device)
    z = (x * y + 2).cpu()
    return [metric(f"async.z{j}", z[0, j].item(), "", str(device)) for j in (0, 1)]


def asynchrony(size: int = 1000, steps: int = 10, repeats: int = 3, seed: int = 0) -> list[dict]:
    """The book's numpy vs torch benchmark: ``steps`` times a ``size``² normal matrix and its
    square, with numpy on the CPU, then with torch: on the CPU timed until it returns and
    until its result is read, on CUDA without and with synchronization (each the median of
    ``repeats`` book-style single runs), and z = x * y + 2 on the GPU."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)

    def numpy_loop():
        for _ in range(steps):
            a = rng.normal(size=(size, size))
            np.dot(a, a)

    numpy_s = statistics.median(naive_time(numpy_loop, "cpu", False) for _ in range(repeats))
    rows = [metric("async.numpy_s", numpy_s, "s", "cpu")]
    rows += [
        metric(f"async.cpu.{k}", v, RETURN_UNITS[k], "cpu")
        for k, v in operator_return(torch.device("cpu"), size, steps, repeats).items()
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


def queue_memory(size: int = 4096, steps: int = 100) -> list[dict]:
    """Peak CUDA memory of ``steps`` rounds of fresh ``size``² tensors, a product and a ReLU,
    queued without waiting versus synchronized every step (the book's warning that an
    unchecked queue can use too much memory)."""
    names = ("async.memory.nosync_peak_bytes", "async.memory.sync_peak_bytes")
    reason = unavailable(cuda=1)
    if reason:
        return [not_applicable(name, reason, "B") for name in names]
    device = torch.device("cuda", 0)
    rows = []
    for name, sync_each in zip(names, (False, True)):
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        for _ in range(steps):
            x = torch.randn(size, size, device=device)
            out = x @ x
            out.relu()
            if sync_each:
                synchronize(device)
        synchronize(device)
        rows.append(metric(name, torch.cuda.max_memory_allocated(device), "B", str(device)))
    if rows[0]["value"] == rows[1]["value"]:
        # A finding, not a failure of the measurement: the queue never holds more live tensors.
        note = (
            "PyTorch's caching allocator hands each step the blocks the previous step freed, "
            "so the unsynchronized queue peaks no higher"
        )
        rows = [row | {"note": note} for row in rows]
    return rows


def measure(cfg: dict, seed: int) -> list[dict]:
    """Every measurement of the section with the ``asynchrony`` config."""
    rows = asynchrony(cfg["size"], cfg["steps"], cfg["repeats"], seed)
    return rows + queue_memory(cfg["memory_size"], cfg["memory_steps"])
