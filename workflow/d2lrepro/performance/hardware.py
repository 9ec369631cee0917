"""Hardware (``hw.*``): the memory hierarchy seen by a sum over growing arrays and by dependent
random reads (latency, :mod:`d2lrepro.performance.latency`), and host <-> device copies.

Metrics: ``lat.{l1,l2,mib256}_ns``, ``lat.{l2_over_l1,mib256_over_l2}{,_iqr}``;
``bandwidth.{h2d,d2h}.{pinned,pageable}.mib{N}.gbps``; ``latency.h2d.pinned.mib1.{us,iqr_us}``;
``transfers.{cpu,cuda}.{one,many}.{median,iqr}_s``; ``launch.{cpu,cuda}.{us,iqr_us}``.
"""

from __future__ import annotations

import itertools
import logging
import time

import pandas as pd
import torch

from d2lrepro.core import devices, logs, plotting
from d2lrepro.core.devices import synchronize, unavailable
from d2lrepro.core.results import metric, not_applicable
from d2lrepro.core.timing import alternated, intra_op_threads, spread, time_fn
from d2lrepro.performance.latency import (
    KIB,
    MIB,
    cache_sizes,
    l3_size,
    latency_metrics,
    latency_ratios,
    latency_sweep,
    sweep_sizes,
)

log = logging.getLogger(__name__)
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
    if reason:
        return rows + [not_applicable(n, reason, "µs") for n in LATENCY_METRICS]
    return rows + microseconds(LATENCY_METRICS, copy_latency(device), device)


# The median and the IQR of a copy's latency, and of a launch (launch.{cpu,cuda}.*).
LATENCY_METRICS = ("latency.h2d.pinned.mib1.us", "latency.h2d.pinned.mib1.iqr_us")


def microseconds(names, seconds: list[float], device: torch.device) -> list[dict]:
    """The median and the IQR of ``seconds`` in µs, as the metrics ``names``."""
    timing = spread(seconds)
    return [
        metric(name, timing[stat] * 1e6, "µs", str(device))
        for name, stat in zip(names, ("median", "iqr"))
    ]


def copy_latency(device: torch.device, mib: int = 1, repeats: int = 50) -> list[float]:
    """Seconds of each pinned host-to-device copy of ``mib`` MiB, the device idle before
    and waited for after each (the book's latency, not a queue's throughput), after one
    untimed."""
    host = torch.empty(mib * MIB, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(mib * MIB, dtype=torch.uint8, device=device)
    times = []
    for _ in range(repeats + 1):
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        gpu.copy_(host, non_blocking=True)
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return times[1:]


def transfer_cost(
    device: torch.device, total_mib: int = 16, chunk_kib: int = 4, max_run_time: float = 2.0
) -> list[dict]:
    """The book's summary: per-operation overheads make a few large transfers beat many small
    ones. ``total_mib`` MiB copied by one copy call, and by one call per ``chunk_kib`` KiB
    piece: host to host memory on the CPU, pinned host memory to the GPU with CUDA. The two
    take turns, round by round, so that a change of the machine's load falls on both alike."""
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
    for name, seconds in alternated(
        {"one": one, "many": many}, device, max_run_time=max_run_time
    ).items():
        timing = spread(seconds)
        for stat in ("median", "iqr"):
            rows.append(metric(f"transfers.{kind}.{name}.{stat}_s", timing[stat], "s", str(device)))
    return rows


def launch_seconds(device: torch.device, launches: int = 1000, queues: int = 10) -> list[float]:
    """Seconds per operation of each of ``queues`` queues of ``launches`` in-place adds on a
    one-element tensor (after one untimed): on a GPU the cost of launching a kernel, on the
    CPU of dispatching an operator; the device idle before each and waited for after."""
    x = torch.zeros(1, device=device)
    times = []
    for _ in range(queues + 1):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(launches):
            x.add_(1)
        synchronize(device)
        times.append((time.perf_counter() - start) / launches)
    return times[1:]


def overheads(cfg: dict) -> list[dict]:
    """Per-operation overheads: many small against one large transfer, and the time per
    launch, on the CPU and (or "not applicable here") on the first GPU."""
    reason = unavailable(cuda=1)
    rows = []
    for kind in ("cpu", "cuda"):
        names = [f"transfers.{kind}.{n}.{s}_s" for n in ("one", "many") for s in ("median", "iqr")]
        launches = (f"launch.{kind}.us", f"launch.{kind}.iqr_us")
        if kind == "cuda" and reason:
            rows += [not_applicable(n, reason, "s") for n in names]
            rows += [not_applicable(n, reason, "µs") for n in launches]
            continue
        device = torch.device(kind, 0) if kind == "cuda" else torch.device("cpu")
        rows += transfer_cost(device, cfg["transfer_mib"], cfg["transfer_chunk_kib"])
        rows += microseconds(launches, launch_seconds(device), device)
    for row in rows:
        log.info("%s: %.4g %s %s", row["metric"], row["value"], row["unit"], row["note"])
    return rows


def memory_sweep(
    max_bytes: int = 256 * MIB,
    min_bytes: int = 16 * KIB,
    on_devices=None,
    threads: int | None = 1,
    min_run_time: float = 0.05,
    max_run_time: float = 1.0,
) -> pd.DataFrame:
    """Throughput (GB/s, 1e9 bytes) of summing a float32 array, per device and array size;
    ``on_devices`` default to the CPU and, where present, the first GPU. The CPU sums on ``threads``
    intra-op threads (None: torch's setting): by default one core and its own caches, which
    also spares the sweep the thread pool's stalls when another process holds a core. The
    smallest sizes measure the per-call overhead (microseconds) more than the cache."""
    if on_devices is None:
        on_devices = ["cpu"] + (["cuda:0"] if devices.cuda_count() else [])
    rows = []
    with intra_op_threads(threads):
        for device, size in itertools.product(on_devices, sweep_sizes(max_bytes, min_bytes)):
            x = torch.ones(size // 4, device=device)
            timing = time_fn(x.sum, device, min_run_time, max_run_time)
            rows.append(
                {"device": str(device), "bytes": size, "gbps": size / timing["median"] / 1e9}
            )
    return pd.DataFrame(rows, columns=["device", "bytes", "gbps"])


def draw_memory_sweep(
    sweep: pd.DataFrame,
    latency: pd.DataFrame | None,
    path,
    footer: str,
    caches: dict[str, int] | None = None,
) -> None:
    """Sum throughput (log y: a CPU's tens of GB/s beside a GPU's thousands) and dependent-read
    latency against the working set (log x), dotted lines at the CPU cache sizes, the book's
    latencies as grey levels."""
    caches = cache_sizes() if caches is None else caches
    fig, (left, right) = plotting.figure(figsize=(9, 3), ncols=2)
    pt = plotting.readable_pt(fig)
    for device, group in sweep.groupby("device", sort=False):
        left.plot(group["bytes"], group["gbps"], "-o", markersize=3, label=device)
    left.set(yscale="log", ylabel="sum throughput (GB/s)", title="Sum of a float32 array")
    plotting.legend_readable(left, loc="best")
    if latency is not None:
        right.plot(latency["bytes"], latency["ns"], "-o", markersize=3, label="cpu, one core")
    for ns in BOOK_LATENCY_NS.values():
        right.axhline(ns, color=plotting.BOOK_GREY, linestyle="--", linewidth=0.8)
    right.set(yscale="log", ylabel="ns per dependent read", title="Latency: random pointer chase")
    if latency is not None:
        plotting.legend_readable(right, loc="lower right")
    for ax in (left, right):
        for label, size in caches.items():
            ax.axvline(size, color="0.3", linestyle=":", linewidth=0.8)
            ax.text(
                size, 0.98, f" {label}", transform=ax.get_xaxis_transform(), va="top", fontsize=pt
            )
        ax.set(xscale="log", xlabel="working set (bytes)")
        ax.grid(True)
    # The book's latencies named on an axis of their own, outside the data.
    book = right.twinx()
    book.set(yscale="log", ylim=right.get_ylim())
    book.set_yticks(list(BOOK_LATENCY_NS.values()), [f"book {k}" for k in BOOK_LATENCY_NS])
    book.minorticks_off()
    book.tick_params(axis="y", colors=plotting.BOOK_GREY, labelsize=pt)
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
    started = time.perf_counter()
    rows = latency_metrics(latency, caches) + latency_ratios(latency, caches) + l3_size(caches)
    started = logs.progress(log, "the latency metrics and ratios", started)
    rows += bandwidth(cfg["bandwidth_mib"])
    started = logs.progress(log, "the copy bandwidths", started)
    rows += overheads(cfg)
    logs.progress(log, "the transfers and launches", started)
    return sweep, latency, rows, caches
