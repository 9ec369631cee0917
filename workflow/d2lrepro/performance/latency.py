"""Memory latency (``hw.lat``): dependent random reads through a working set, one per cache
line, timed by a pointer chase compiled with the machine's C compiler, and the CPU's cache
sizes the working sets are read against.

Metrics: ``lat.{l1,l2,mib256}_ns`` (from the sweep), ``lat.{l2_over_l1,mib256_over_l2}`` and
their ``_iqr`` (the levels' chases timed side by side in rounds).
"""

from __future__ import annotations

import ctypes
import math
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from d2lrepro.core.results import metric, not_applicable
from d2lrepro.core.timing import spread

KIB, MIB = 1024, 1024**2
CACHE_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")
# The pointer chase: one load per hop, each address the previous load's result, and no
# interpreter between two loads, so a hop costs the latency of the level the chain lives in.
CHASE_C = """
#include <stdint.h>
int64_t chase(const int64_t *next, int64_t start, int64_t hops) {
    int64_t p = start;
    for (int64_t i = 0; i < hops; i++) p = next[p];
    return p;
}
"""
LINE = 64  # bytes: one link of the chain per cache line
# Working sets up to this size may sit in a cache: their chains stay allocated (the next ones
# land elsewhere) and are warmed by a lap before each timed walk.
CACHED = 64 * 1024**2
LEVELS = ("l1", "l2", "mib256")
# Each ratio of two levels' latencies: (the slower level, the faster one).
RATIOS = {"l2_over_l1": ("l2", "l1"), "mib256_over_l2": ("mib256", "l2")}
RATIO_METRICS = [f"{ratio}{end}" for ratio in RATIOS for end in ("", "_iqr")]


def _compile_chase():
    """The chase loop built by the machine's C compiler (the one torch.compile uses), or None
    where there is none."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        return None
    with tempfile.TemporaryDirectory(prefix="d2lrepro-chase-") as folder:
        source, library = Path(folder) / "chase.c", Path(folder) / "chase.so"
        source.write_text(CHASE_C)
        command = [compiler, "-O2", "-shared", "-fPIC", str(source), "-o", str(library)]
        subprocess.run(command, check=True, capture_output=True)
        chase = ctypes.CDLL(str(library)).chase
    chase.restype = ctypes.c_int64
    chase.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    return chase


def chase_chain(working_set: int, seed: int = 0) -> tuple[torch.Tensor, int]:
    """A random cycle through every cache line of ``working_set`` bytes (so no prefetcher can
    guess the next line): entry ``p`` of the flat buffer holds the index of the next link.
    Returns the buffer and the index of a first link."""
    lines, per_line = max(2, working_set // LINE), LINE // 8
    order = torch.randperm(lines, generator=torch.Generator().manual_seed(seed))
    buffer = torch.zeros(lines, per_line, dtype=torch.int64)
    buffer[order, 0] = order.roll(-1) * per_line
    return buffer, int(order[0]) * per_line


def sweep_sizes(max_bytes: int, min_bytes: int = 16 * KIB) -> list[int]:
    """Powers of two from ``min_bytes`` up to ``max_bytes``."""
    return [min_bytes << i for i in range(int(math.log2(max_bytes // min_bytes)) + 1)]


def latency_sweep(
    max_bytes: int, min_bytes: int = 4 * KIB, hops: int = 1_000_000, repeats: int = 5
) -> pd.DataFrame | None:
    """Nanoseconds per dependent random read against the working set (powers of two): the
    median of ``repeats`` walks of ``hops`` links of :func:`chase_chain`, after a warm-up lap.
    None without a C compiler."""
    chase = _compile_chase()
    if chase is None:
        return None
    rows = []
    for size in sweep_sizes(max_bytes, min_bytes):
        buffer, start = chase_chain(size)
        chase(buffer.data_ptr(), start, buffer.shape[0])
        times = []
        for _ in range(repeats):  # each walk goes on where the last stopped: no line twice
            begin = time.perf_counter()
            start = chase(buffer.data_ptr(), start, hops)
            times.append(time.perf_counter() - begin)
        rows.append({"bytes": size, "ns": statistics.median(times) / hops * 1e9})
    return pd.DataFrame(rows, columns=["bytes", "ns"])


def picked(latency: pd.DataFrame, caches: dict[str, int]) -> dict[str, int | str]:
    """The working set (bytes) that stands for each level, or why there is none: for L1 the
    largest within half of L1d, for L2 the largest within half of L2 beyond L1d, and the book's
    256 MiB."""
    l1, l2 = caches.get("L1d"), caches.get("L2")
    candidates = {
        "l1": latency[latency["bytes"] <= l1 / 2] if l1 else None,
        "l2": latency[(latency["bytes"] <= l2 / 2) & (latency["bytes"] > l1)]
        if l1 and l2
        else None,
        "mib256": latency[latency["bytes"] == 256 * MIB],
    }
    sizes: dict[str, int | str] = {}
    for level, rows in candidates.items():
        if rows is not None and len(rows):
            sizes[level] = int(rows["bytes"].iloc[-1])
        elif level == "mib256":
            largest = latency["bytes"].max() / MIB
            sizes[level] = f"the chase stops at {largest:g} MiB (hardware.latency_max_mib)"
        else:
            sizes[level] = "cache sizes unknown on this machine"
    return sizes


NO_COMPILER = "no C compiler (cc) here to build the pointer chase"


def latency_metrics(latency: pd.DataFrame | None, caches: dict[str, int]) -> list[dict]:
    """Latency of an L1, an L2 and a 256 MiB reference, read from the sweep (:func:`picked`)."""
    if latency is None:
        return [not_applicable(f"lat.{level}_ns", NO_COMPILER, "ns") for level in LEVELS]
    ns = dict(zip(latency["bytes"], latency["ns"]))
    return [
        metric(f"lat.{level}_ns", ns[size], "ns")
        if isinstance(size, int)
        else not_applicable(f"lat.{level}_ns", size, "ns")
        for level, size in picked(latency, caches).items()
    ]


def l3_size(caches: dict[str, int]) -> list[dict]:
    """The L3 cache's size in MiB: a working set that fits in it is not a memory reference."""
    if "L3" not in caches:
        return [not_applicable("cache.l3_mib", "sysfs reports no L3 cache here", "MiB")]
    return [metric("cache.l3_mib", caches["L3"] / MIB, "MiB")]


def latency_ratios(
    latency: pd.DataFrame | None,
    caches: dict[str, int],
    hops: int = 1_000_000,
    layouts: int = 8,
    rounds: int = 8,
) -> list[dict]:
    """How many times an L1 reference an L2 one costs, and an L2 one a 256 MiB one, judged on
    the spread over chains and rounds. For each of ``layouts`` chains per level, one after
    another (each a permutation of its own, where a chain lands in the caches changing from
    one run to the next; those up to :data:`CACHED` stay allocated, so that the next ones land
    elsewhere), the three levels are timed side by side
    in ``rounds`` rounds (:func:`timed_rounds`), and each round gives one ratio per pair of
    levels: a load that comes and goes weighs on every level alike. Returns the median and
    IQR over every chain's rounds."""
    if latency is None:
        return [not_applicable(f"lat.{name}", NO_COMPILER, "x") for name in RATIO_METRICS]
    sizes = picked(latency, caches)
    measured = {level: size for level, size in sizes.items() if isinstance(size, int)}
    chase = _compile_chase()
    per_round: dict[str, list[float]] = {ratio: [] for ratio in RATIOS}
    kept = []  # never read: holding the chains keeps the next ones out of their memory
    for layout in range(layouts if measured else 0):
        chains = {level: chase_chain(size, seed=layout) for level, size in measured.items()}
        kept += [chain for level, chain in chains.items() if measured[level] <= CACHED]
        seconds = timed_rounds(chase, chains, hops, rounds)
        for ratio, (slow, fast) in RATIOS.items():
            if slow in seconds and fast in seconds:
                per_round[ratio] += [a / b for a, b in zip(seconds[slow], seconds[fast])]
    rows = []
    for ratio, (slow, fast) in RATIOS.items():
        unmeasured = [sizes[level] for level in (slow, fast) if level not in measured]
        if unmeasured:
            rows += [
                not_applicable(f"lat.{ratio}{end}", unmeasured[0], "x") for end in ("", "_iqr")
            ]
            continue
        spread_of = spread(per_round[ratio])
        rows += [
            metric(f"lat.{ratio}", spread_of["median"], "x"),
            metric(f"lat.{ratio}_iqr", spread_of["iqr"], "x"),
        ]
    return rows


def timed_rounds(chase, chains: dict, hops: int, rounds: int) -> dict[str, list[float]]:
    """Seconds of ``hops`` dependent reads through each chain (level -> (buffer, start)),
    round by round: the levels alternately in their order and in reverse (l1 l2 M, M l2 l1,
    ...; ``rounds`` is even), so that each pair of neighbouring levels is timed back to back
    and each goes first as often.
    Each timed walk through a working set of at most :data:`CACHED` follows an untimed lap of
    its lines, which brings them back after the other levels' walks evicted them; each walk
    goes on where the last one stopped, so a working set larger than ``hops`` lines is read
    through."""
    if rounds % 2:
        raise ValueError(f"rounds must be even, so that each order runs as often: {rounds}")
    at = {level: start for level, (_, start) in chains.items()}
    seconds: dict[str, list[float]] = {level: [] for level in chains}
    for r in range(rounds):
        for level in list(chains) if r % 2 == 0 else reversed(list(chains)):
            buffer = chains[level][0]
            if buffer.nbytes <= CACHED:
                at[level] = chase(buffer.data_ptr(), at[level], buffer.shape[0])
            begin = time.perf_counter()
            at[level] = chase(buffer.data_ptr(), at[level], hops)
            seconds[level].append(time.perf_counter() - begin)
    return seconds


def _parse_size(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)([KMG]?)", text.strip())
    return int(match[1]) * {"": 1, "K": KIB, "M": MIB, "G": 1024**3}[match[2]] if match else None


def cache_sizes(root: Path = CACHE_ROOT) -> dict[str, int]:
    """CPU data-cache sizes in bytes ('L1d', 'L2', 'L3'), as sysfs reports them; {} if it
    does not."""
    sizes = {}
    for index in sorted(root.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            label = f"L{(index / 'level').read_text().strip()}" + ("d" if kind == "Data" else "")
            size = _parse_size((index / "size").read_text())
        except OSError:
            continue
        if kind != "Instruction" and size:
            sizes[label] = size
    return sizes
