"""Asynchronous computation: numpy vs torch with and without synchronization, z = x * y + 2,
and the peak memory of an unsynchronized CUDA queue.

Metrics: ``async.numpy_s``; ``async.{cpu,cuda}.{nosync,sync}_s`` (medians), their ``_iqr_s``
and ``nosync_over_sync``;
``async.z0``, ``async.z1`` (on the GPU where there is one, as in the book, else the CPU);
``async.memory.{nosync,sync}_peak_bytes``.
"""

from __future__ import annotations

import statistics

import numpy as np
import torch

from .devices import synchronize, unavailable
from .results import iqr, metric, not_applicable
from .timing import naive_time

ASYNC_UNITS = {
    "nosync_s": "s",
    "sync_s": "s",
    "nosync_iqr_s": "s",
    "sync_iqr_s": "s",
    "nosync_over_sync": "x",
}


def _torch_async(device: torch.device, size: int, steps: int, repeats: int) -> dict[str, float]:
    def loop():
        for _ in range(steps):
            a = torch.randn(size, size, device=device)
            torch.mm(a, a)

    loop()  # the book's warm-up
    # Alternated, so that both see the same load from whatever else runs on the machine.
    runs = [
        (naive_time(loop, device, False), naive_time(loop, device, True)) for _ in range(repeats)
    ]
    nosync, sync = zip(*runs)
    return {
        "nosync_s": statistics.median(nosync),
        "sync_s": statistics.median(sync),
        "nosync_iqr_s": iqr(nosync),
        "sync_iqr_s": iqr(sync),
        "nosync_over_sync": statistics.median(nosync) / statistics.median(sync),
    }


def dependency_example(device: torch.device) -> list[dict]:
    """The book's z = x * y + 2 on ones, computed on ``device``."""
    x = torch.ones((1, 2), device=device)
    y = torch.ones((1, 2), device=device)
    z = (x * y + 2).cpu()
    return [metric(f"async.z{j}", z[0, j].item(), "", str(device)) for j in (0, 1)]


def asynchrony(size: int = 1000, steps: int = 10, repeats: int = 3, seed: int = 0) -> list[dict]:
    """The book's numpy vs torch benchmark: ``steps`` times a ``size``² normal matrix and its
    square, on the CPU with numpy, then with torch on the CPU and on CUDA, each the median of
    ``repeats`` book-style single runs without and with synchronization, plus z = x * y + 2
    on the GPU (the CPU without one).

    On the CPU torch ops return when done, so nosync_over_sync is about 1; on CUDA they return
    once queued, the book's illusion of speed."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)

    def numpy_loop():
        for _ in range(steps):
            a = rng.normal(size=(size, size))
            np.dot(a, a)

    numpy_s = statistics.median(naive_time(numpy_loop, "cpu", False) for _ in range(repeats))
    rows = [metric("async.numpy_s", numpy_s, "s", "cpu")]
    rows += [
        metric(f"async.cpu.{k}", v, ASYNC_UNITS[k], "cpu")
        for k, v in _torch_async(torch.device("cpu"), size, steps, repeats).items()
    ]
    reason = unavailable(cuda=1)
    if reason:
        return (
            rows
            + dependency_example(torch.device("cpu"))
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
