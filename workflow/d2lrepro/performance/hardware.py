"""Hardware (``hw.*``): the memory hierarchy seen by a sum over growing arrays and by dependent
random reads (latency), the CPU's cache sizes, and host <-> device copies.

Metrics: ``lat.{l1,l2,mib256}_ns``;
``bandwidth.{h2d,d2h}.{pinned,pageable}.mib{N}.gbps``; ``latency.h2d.pinned.mib1.us``;
``transfers.{cpu,cuda}.{one,many}.{median,iqr}_s``; ``launch.{cpu,cuda}.us``.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
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

from d2lrepro.core import devices as machine  # `devices` names the sweep's devices
from d2lrepro.core import plotting
from d2lrepro.core.devices import synchronize, unavailable
from d2lrepro.core.results import metric, not_applicable
from d2lrepro.core.timing import intra_op_threads, time_fn

log = logging.getLogger(__name__)
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
# The book's latency table (TinyMemBench on a Broadwell E5-2690v4), drawn beside ours.
BOOK_LATENCY_NS = {"L1 1.5 ns": 1.5, "L2 5 ns": 5, "L3 16 ns": 16, "256 MB 75 ns": 75}


def bandwidth(
    sizes_mib=(1, 4, 16, 64, 256), min_run_time: float = 0.1, max_run_time: float = 2.0
) -> list[dict]:
    """Host-to-device and device-to-host copy throughput (GB = 1e9 bytes per second), from
    pinned and from pageable host memory."""
    reason = unavailable(cuda=1)
    device = torch.device("cuda", 0)
    rows = []
    for direction, memory, mib in itertools.product(
        ("h2d", "d2h"), ("pinned", "pageable"), sizes_mib
    ):
        name = f"bandwidth.{direction}.{memory}.mib{mib}.gbps"
        if reason:
            rows.append(not_applicable(name, reason, "GB/s"))
            continue
        host = torch.empty(mib * MIB, dtype=torch.uint8, pin_memory=memory == "pinned")
        gpu = torch.empty(mib * MIB, dtype=torch.uint8, device=device)
        source, target = (host, gpu) if direction == "h2d" else (gpu, host)
        timing = time_fn(
            lambda: target.copy_(source, non_blocking=memory == "pinned"),
            device,
            min_run_time,
            max_run_time,
        )
        rows.append(metric(name, mib * MIB / timing["median"] / 1e9, "GB/s", str(device)))
    name = "latency.h2d.pinned.mib1.us"
    rows.append(
        not_applicable(name, reason, "µs")
        if reason
        else metric(name, copy_latency_us(device), "µs", str(device))
    )
    return rows


def copy_latency_us(device: torch.device, mib: int = 1, repeats: int = 50) -> float:
    """Microseconds of one pinned host-to-device copy of ``mib`` MiB, the device idle before
    and waited for after each (the book's latency, not a queue's throughput): the median."""
    host = torch.empty(mib * MIB, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(mib * MIB, dtype=torch.uint8, device=device)
    times = []
    for _ in range(repeats + 1):
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        gpu.copy_(host, non_blocking=True)
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) * 1e6


def transfer_cost(
    device: torch.device, total_mib: int = 16, chunk_kib: int = 4, max_run_time: float = 2.0
) -> list[dict]:
    """The book's summary: per-operation overheads make a few large transfers beat many small
    ones. ``total_mib`` MiB copied by one copy call, and by one call per ``chunk_kib`` KiB
    piece: host to host memory on the CPU, pinned host memory to the GPU with CUDA."""
    kind = device.type
    host = torch.ones(total_mib * MIB, dtype=torch.uint8, pin_memory=kind == "cuda")
    target = torch.empty_like(host, device=device)
    pieces = list(zip(target.split(chunk_kib * KIB), host.split(chunk_kib * KIB)))

    def one():
        target.copy_(host, non_blocking=True)

    def many():
        for piece, source in pieces:
            piece.copy_(source, non_blocking=True)

    rows = []
    for name, fn in (("one", one), ("many", many)):
        timing = time_fn(fn, device, max_run_time=max_run_time)
        for stat in ("median", "iqr"):
            rows.append(metric(f"transfers.{kind}.{name}.{stat}_s", timing[stat], "s", str(device)))
    return rows


def launch_us(device: torch.device, launches: int = 1000) -> float:
    """Microseconds per operation of a queue of ``launches`` in-place adds on a one-element
    tensor: on a GPU the cost of launching a kernel, on the CPU of dispatching an operator;
    the median of 5 queues, the device idle before each and waited for after."""
    x = torch.zeros(1, device=device)
    times = []
    for _ in range(6):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(launches):
            x.add_(1)
        synchronize(device)
        times.append((time.perf_counter() - start) / launches)
    return statistics.median(times[1:]) * 1e6


def overheads(cfg: dict) -> list[dict]:
    """Per-operation overheads: many small against one large transfer, and the time per
    launch, on the CPU and (or "not applicable here") on the first GPU."""
    reason = unavailable(cuda=1)
    rows = []
    for kind in ("cpu", "cuda"):
        names = [f"transfers.{kind}.{n}.{s}_s" for n in ("one", "many") for s in ("median", "iqr")]
        if kind == "cuda" and reason:
            rows += [not_applicable(n, reason, "s") for n in names]
            rows.append(not_applicable("launch.cuda.us", reason, "µs"))
            continue
        device = torch.device(kind, 0) if kind == "cuda" else torch.device("cpu")
        rows += transfer_cost(device, cfg["transfer_mib"], cfg["transfer_chunk_kib"])
        rows.append(metric(f"launch.{kind}.us", launch_us(device), "µs", str(device)))
    for row in rows:
        log.info("%s: %.4g %s %s", row["metric"], row["value"], row["unit"], row["note"])
    return rows


def sweep_sizes(max_bytes: int, min_bytes: int = 16 * KIB) -> list[int]:
    """Powers of two from ``min_bytes`` up to ``max_bytes``."""
    return [min_bytes << i for i in range(int(math.log2(max_bytes // min_bytes)) + 1)]


def memory_sweep(
    max_bytes: int = 256 * MIB,
    min_bytes: int = 16 * KIB,
    devices=None,
    threads: int | None = 1,
    min_run_time: float = 0.05,
    max_run_time: float = 1.0,
) -> pd.DataFrame:
    """Throughput (GB/s, 1e9 bytes) of summing a float32 array, per device and array size;
    devices default to the CPU and, where present, the first GPU. The CPU sums on ``threads``
    intra-op threads (None: torch's setting): by default one core and its own caches, which
    also spares the sweep the thread pool's stalls when another process holds a core. The
    smallest sizes measure the per-call overhead (microseconds) more than the cache."""
    if devices is None:
        devices = ["cpu"] + (["cuda:0"] if machine.cuda_count() else [])
    rows = []
    with intra_op_threads(threads):
        for device, size in itertools.product(devices, sweep_sizes(max_bytes, min_bytes)):
            x = torch.ones(size // 4, device=device)
            timing = time_fn(x.sum, device, min_run_time, max_run_time)
            rows.append(
                {"device": str(device), "bytes": size, "gbps": size / timing["median"] / 1e9}
            )
    return pd.DataFrame(rows, columns=["device", "bytes", "gbps"])


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
        for _ in range(repeats):
            begin = time.perf_counter()
            chase(buffer.data_ptr(), start, hops)
            times.append(time.perf_counter() - begin)
        rows.append({"bytes": size, "ns": statistics.median(times) / hops * 1e9})
    return pd.DataFrame(rows, columns=["bytes", "ns"])


def latency_metrics(latency: pd.DataFrame | None, caches: dict[str, int]) -> list[dict]:
    """Latency of an L1 reference (the largest working set within half of L1d), of an L2 one
    (within half of L2, beyond L1d) and in the book's 256 MiB working set."""
    names = ("lat.l1_ns", "lat.l2_ns", "lat.mib256_ns")
    if latency is None:
        reason = "no C compiler (cc) here to build the pointer chase"
        return [not_applicable(name, reason, "ns") for name in names]
    l1, l2 = caches.get("L1d"), caches.get("L2")
    picks = {
        names[0]: latency[latency["bytes"] <= l1 / 2] if l1 else None,
        names[1]: latency[(latency["bytes"] <= l2 / 2) & (latency["bytes"] > l1)]
        if l1 and l2
        else None,
        names[2]: latency[latency["bytes"] == 256 * MIB],
    }
    rows = []
    for name, rows_in in picks.items():
        if rows_in is not None and len(rows_in):
            rows.append(metric(name, rows_in["ns"].iloc[-1], "ns"))
        elif name == names[2]:
            largest = latency["bytes"].max() / MIB
            why = f"the chase stops at {largest:g} MiB (hardware.latency_max_mib)"
            rows.append(not_applicable(name, why, "ns"))
        else:
            rows.append(not_applicable(name, "cache sizes unknown on this machine", "ns"))
    return rows


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


def draw_memory_sweep(
    sweep: pd.DataFrame,
    latency: pd.DataFrame | None,
    path,
    footer: str,
    caches: dict[str, int] | None = None,
) -> None:
    """Sum throughput and dependent-read latency against the working set (log x), dotted lines
    at the CPU cache sizes, the book's latencies as grey levels."""
    caches = cache_sizes() if caches is None else caches
    fig, (left, right) = plotting.figure(figsize=(9, 3), ncols=2)
    for device, group in sweep.groupby("device", sort=False):
        left.plot(group["bytes"], group["gbps"], "-o", markersize=3, label=device)
    left.set(ylabel="sum throughput (GB/s)", title="Sum of a float32 array")
    left.legend(fontsize=6)
    if latency is not None:
        right.plot(latency["bytes"], latency["ns"], "-o", markersize=3, label="cpu, one core")
    for label, ns in BOOK_LATENCY_NS.items():
        right.axhline(ns, color="0.6", linestyle="--", linewidth=0.8)
        right.text(
            1,
            ns,
            f"book {label} ",
            transform=right.get_yaxis_transform(),
            ha="right",
            va="bottom",
            fontsize=6,
            color="0.4",
        )
    right.set(yscale="log", ylabel="ns per dependent read", title="Latency: random pointer chase")
    for ax in (left, right):
        for label, size in caches.items():
            ax.axvline(size, color="0.5", linestyle=":", linewidth=0.8)
            ax.text(
                size, 0.98, f" {label}", transform=ax.get_xaxis_transform(), va="top", fontsize=6
            )
        ax.set(xscale="log", xlabel="working set (bytes)")
        ax.grid(True)
    plotting.save(fig, path, footer=footer)


def measure(cfg: dict):
    """The section with the ``hardware`` config: the memory sweep, the latency sweep (None
    without a C compiler), the latency metrics with the copy bandwidths and latency, and the
    cache sizes the sweeps are read against."""
    caches = cache_sizes()
    log.info("caches %s; sweep up to %d MiB", caches, cfg["sweep_max_mib"])
    sweep = memory_sweep(cfg["sweep_max_mib"] * MIB)
    for row in sweep.itertuples():
        log.info("%s %d bytes: %.2f GB/s", row.device, row.bytes, row.gbps)
    latency = latency_sweep(cfg["latency_max_mib"] * MIB)
    for row in [] if latency is None else latency.itertuples():
        log.info("dependent read, %d bytes: %.2f ns", row.bytes, row.ns)
    rows = latency_metrics(latency, caches) + bandwidth(cfg["bandwidth_mib"]) + overheads(cfg)
    return sweep, latency, rows, caches
