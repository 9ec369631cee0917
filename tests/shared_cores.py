"""How busy other processes kept the CPU while a test timed something: a timing claim that
fails while the cores were shared cannot be judged, and the test says so instead of failing."""

import os
import time

import pytest

# Cores' worth of other work above which a failed timing is not judged.
BUSY = 0.25


def _busy_s() -> float:
    """Seconds of CPU time all processes have used since boot (Linux /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:8]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # minus idle, iowait


def timed_alone(fn):
    """``fn()``, and the cores that other processes kept busy on average while it ran."""
    busy, own, start = _busy_s(), time.process_time(), time.perf_counter()
    result = fn()
    others = (_busy_s() - busy) - (time.process_time() - own)
    return result, max(others, 0.0) / (time.perf_counter() - start)


def skip_if_shared(verdict: str, expected: str, others: float, what: str) -> None:
    """Skip, with the reason, when ``verdict`` is not ``expected`` and the cores were shared."""
    if verdict != expected and others > BUSY:
        pytest.skip(f"{what}: other processes kept {others:.2f} cores busy while it was timed")
