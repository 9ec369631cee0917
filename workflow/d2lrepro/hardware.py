"""Hardware: the memory hierarchy seen by a sum over growing arrays, the CPU's cache sizes,
and host <-> device copy bandwidth.

Metrics: ``sweep.cache_gbps``, ``sweep.ram_gbps``;
``bandwidth.{h2d,d2h}.{pinned,pageable}.mib{N}.gbps``.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
from pathlib import Path

import pandas as pd
import torch

from . import plotting
from .devices import cuda_count, unavailable
from .results import metric, not_applicable
from .timing import intra_op_threads, time_fn

log = logging.getLogger(__name__)
KIB, MIB = 1024, 1024**2
CACHE_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")


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
        devices = ["cpu"] + (["cuda:0"] if cuda_count() else [])
    rows = []
    with intra_op_threads(threads):
        for device, size in itertools.product(devices, sweep_sizes(max_bytes, min_bytes)):
            x = torch.ones(size // 4, device=device)
            timing = time_fn(x.sum, device, min_run_time, max_run_time)
            rows.append(
                {"device": str(device), "bytes": size, "gbps": size / timing["median"] / 1e9}
            )
    return pd.DataFrame(rows, columns=["device", "bytes", "gbps"])


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


def plot_memory_sweep(
    sweep: pd.DataFrame, path, footer: str, caches: dict[str, int] | None = None
) -> None:
    """Sum throughput against array size (log x), with dotted lines at the CPU cache sizes."""
    caches = cache_sizes() if caches is None else caches
    fig, ax = plotting.figure(figsize=(4.5, 3))
    for device, group in sweep.groupby("device", sort=False):
        ax.plot(group["bytes"], group["gbps"], "-o", markersize=3, label=device)
    for label, size in caches.items():
        ax.axvline(size, color="0.5", linestyle=":", linewidth=0.8)
        ax.text(size, 0.98, f" {label}", transform=ax.get_xaxis_transform(), va="top", fontsize=6)
    ax.set(
        xscale="log",
        xlabel="array size (bytes)",
        ylabel="sum throughput (GB/s)",
        title="Memory hierarchy: sum of a float32 array",
    )
    ax.legend(fontsize=6)
    ax.grid(True)
    plotting.save(fig, path, footer=footer)


def sweep_metrics(sweep: pd.DataFrame, caches: dict[str, int]) -> list[dict]:
    """CPU throughput from cache (best array that fits in L2) against from main memory (the
    largest array, when it is larger than the last cache level)."""
    cpu = sweep[sweep["device"] == "cpu"]
    rows = []
    l2 = caches.get("L2")
    in_cache = cpu[cpu["bytes"] <= l2] if l2 else cpu.iloc[0:0]
    rows.append(
        metric("sweep.cache_gbps", in_cache["gbps"].max(), "GB/s")
        if len(in_cache)
        else not_applicable("sweep.cache_gbps", "cache sizes unknown on this machine", "GB/s")
    )
    last_level = max(caches.values(), default=None)
    largest = cpu.iloc[-1]
    if last_level and largest["bytes"] > last_level:
        rows.append(metric("sweep.ram_gbps", largest["gbps"], "GB/s"))
    else:
        reason = (
            f"the sweep stops at {largest['bytes'] // MIB} MiB, inside the"
            f" {last_level // MIB} MiB last-level cache"
            if last_level
            else "cache sizes unknown on this machine"
        )
        rows.append(not_applicable("sweep.ram_gbps", reason, "GB/s"))
    return rows


def measure(cfg: dict) -> tuple[pd.DataFrame, list[dict], dict[str, int]]:
    """The section with the ``hardware`` config: the memory sweep, its metrics and the copy
    bandwidths, and the cache sizes the sweep is read against."""
    caches = cache_sizes()
    log.info("caches %s; sweep up to %d MiB", caches, cfg["sweep_max_mib"])
    sweep = memory_sweep(cfg["sweep_max_mib"] * MIB)
    for row in sweep.itertuples():
        log.info("%s %d bytes: %.2f GB/s", row.device, row.bytes, row.gbps)
    return sweep, sweep_metrics(sweep, caches) + bandwidth(cfg["bandwidth_mib"]), caches
