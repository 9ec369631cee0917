"""Timers: one synchronize-and-clock context, points in time on a device's queue,
torch.utils.benchmark, the book's naive loop."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable

import torch

from d2lrepro.core.devices import synchronize
from d2lrepro.core.results import metric

NAN_TIMING = {"median": math.nan, "iqr": math.nan, "runs": math.nan}


class Clock:
    """Seconds of a ``with`` block, measured once ``devices`` have finished the work queued
    before it and the work queued inside it."""

    def __init__(self, *devices):
        self.devices = devices
        self.seconds = math.nan

    def __enter__(self) -> Clock:
        synchronize(*self.devices)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(*self.devices)
        self.seconds = time.perf_counter() - self._start


class Stamps:
    """Points in time of the work queued on ``device``, each with a count (of examples done,
    say): on a GPU a CUDA event recorded on the device's current stream, so that stamping waits
    for nothing and leaves the queue full; on the CPU, whose operations finish before they
    return, the clock."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.stamps: list[tuple[object, int]] = []

    def stamp(self, count: int) -> None:
        if self.device.type == "cuda":
            at = torch.cuda.Event(enable_timing=True)
            at.record(torch.cuda.current_stream(self.device))
        else:
            at = time.perf_counter()
        self.stamps.append((at, count))

    def seconds(self) -> list[tuple[float, int]]:
        """(seconds since the first stamp, its count) of each stamp, once the device has
        reached the last one."""
        if not self.stamps:
            return []
        first = self.stamps[0][0]
        if self.device.type != "cuda":
            return [(at - first, count) for at, count in self.stamps]
        self.stamps[-1][0].synchronize()
        return [(first.elapsed_time(at) / 1e3, count) for at, count in self.stamps]


def time_fn(fn: Callable, device, min_run_time: float = 0.2, max_run_time: float = 10.0) -> dict:
    """Seconds per call of ``fn``: median and IQR over ``runs`` timed blocks, after warm-up.

    torch.utils.benchmark picks the block size and warms up; its clock waits for ``device``
    (Timer's default clock waits for the current accelerator, which need not be ``device``),
    and the thread count is torch's current one (Timer's own default is 1).
    """

    # imported here, not with this module: importing it asks the CUDA driver for its devices,
    # which starts a driver thread, and the job server imports every module before it forks
    from torch.utils import benchmark

    def clock():
        synchronize(device)
        return time.perf_counter()

    timer = benchmark.Timer(
        "fn()", globals={"fn": fn}, timer=clock, num_threads=torch.get_num_threads()
    )
    m = timer.adaptive_autorange(min_run_time=min_run_time, max_run_time=max_run_time)
    return {"median": m.median, "iqr": m.iqr, "runs": len(m.times)}


def paired_ratio(
    fn_a: Callable,
    fn_b: Callable,
    device,
    block_s: float = 0.02,
    min_rounds: int = 7,
    max_rounds: int = 25,
    max_run_time: float = 10.0,
) -> dict:
    """Seconds of ``fn_a`` over seconds of ``fn_b``: median and IQR over rounds, each timing
    one block of calls of both, in alternating order (a b, b a, ...). A drift of the machine
    between two separate timings, which neither timing's own IQR sees, moves both alike here,
    so two timings of the same code give a ratio about 1 with an IQR that covers the drift."""
    calls = 1
    while True:  # as many calls per block as take ``block_s`` of the first function
        with Clock(device) as clock:
            for _ in range(calls):
                fn_a()
        if clock.seconds >= block_s or calls >= 1 << 20:
            break
        calls *= 2
    ratios, start = [], time.perf_counter()
    while len(ratios) < min_rounds or (
        len(ratios) < max_rounds and time.perf_counter() - start < max_run_time
    ):
        seconds = {}
        for which in "ab" if len(ratios) % 2 == 0 else "ba":
            fn = fn_a if which == "a" else fn_b
            with Clock(device) as clock:
                for _ in range(calls):
                    fn()
            seconds[which] = clock.seconds
        ratios.append(seconds["a"] / seconds["b"])
    return spread(ratios)


def spread(values: list[float]) -> dict:
    """Median, IQR and count of ``values``, as :func:`time_fn` reports a timing."""
    quartiles = torch.tensor(values, dtype=torch.float64).quantile(
        torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64)
    )
    low, median, high = quartiles.tolist()
    return {"median": median, "iqr": high - low, "runs": len(values)}


def alternated(
    parts: dict[str, Callable],
    device,
    min_rounds: int = 7,
    max_rounds: int = 25,
    max_run_time: float = 10.0,
) -> dict[str, list[float]]:
    """Seconds of one call of each of ``parts``, round by round, after one warm-up call each.
    Every round calls each part once, the order turned by one each round (a b c, b c a, ...),
    so that a drift of the machine (another job starting, a clock slowing) weighs on all the
    parts alike and on the per-round ratios hardly at all: what a comparison of the parts
    must beat is the spread of those ratios, which separate timings would hide. At least
    ``min_rounds``, then more while ``max_run_time`` lasts, at most ``max_rounds``."""
    names = list(parts)
    for fn in parts.values():
        fn()
    seconds: dict[str, list[float]] = {name: [] for name in names}
    start = time.perf_counter()
    while (done := len(seconds[names[0]])) < min_rounds or (
        done < max_rounds and time.perf_counter() - start < max_run_time
    ):
        turn = done % len(names)
        for name in names[turn:] + names[:turn]:
            with Clock(device) as clock:
                parts[name]()
            seconds[name].append(clock.seconds)
    return seconds


def naive_time(fn: Callable, device, sync: bool) -> float:
    """The book's d2l.Benchmark: wall-clock seconds of one call, no warm-up; with ``sync``
    the clock stops only once ``device`` has finished."""
    synchronize(device)  # work queued before the clock starts is not charged to it
    start = time.perf_counter()
    fn()
    if sync:
        synchronize(device)
    return time.perf_counter() - start


@contextlib.contextmanager
def intra_op_threads(n: int | None):
    """torch's intra-op thread count set to ``n`` (None: left as it is), restored afterwards."""
    threads = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def timing_rows(name: str, timing: dict, device: str, note: str = "") -> list[dict]:
    """``{name}.median_s``, ``.iqr_s`` and ``.runs`` of one :func:`time_fn` result."""
    return [
        metric(f"{name}.median_s", timing["median"], "s", device, note),
        metric(f"{name}.iqr_s", timing["iqr"], "s", device, note),
        metric(f"{name}.runs", timing["runs"], "", device, note),
    ]
