"""Parameter servers (the book's §15): what synchronizing a fixed gradient volume costs by
each strategy the section compares, measured by the workers of a run on their own devices
(GPUs with NCCL, else CPU processes with gloo).

- ``gather``: every worker's gradient summed on worker 0, then the sum sent back to each
  (reduce + broadcast: the book's "aggregate on one GPU").
- ``host``: the same through host memory (copy to the CPU, gloo, copy back); on CPU workers
  the gradients already live there, so it is not applicable.
- ``ring``: the work split across all workers (all-reduce: reduce-scatter + all-gather
  around a ring, what NCCL and gloo do).
- ``update.n1`` / ``update.split``: one SGD update of all parameters on one server, and of a
  1/N share on each of N servers at once, each server timing its own share: the update is
  done when the slowest server is, so ``update.split`` is the maximum over the servers of
  each repeat; ``update.split_x_n`` is N times it, which O(m/n) (the book's claim) keeps at
  ``update.n1``.

Metrics, under a ``prefix`` per run (``ps`` for 2 workers, ``ps.all`` for all the devices):
``{gather,host,ring,update.n1,update.split,update.split_x_n}.{median,iqr}_s``,
``ring.busbw_gbps`` and ``ring.busbw_iqr_gbps`` (the ring's bus bandwidth, 2(N-1)/N of the
gradient's bytes per second, median and IQR over the repeats) and ``workers``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from .devices import synchronize, world_size
from .results import iqr, metric, not_applicable

MB = 10**6
LR = 0.1


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn`` after one warm-up, every worker starting
    together (a barrier) and each call waited for on ``device``."""
    times = []
    for _ in range(repeats + 1):
        synchronize(device)
        dist.barrier()
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times[1:]


def gather(grad: torch.Tensor, group=None) -> None:
    """Sum on worker 0, then send the sum back to every worker (in place)."""
    dist.reduce(grad, dst=0, group=group)
    dist.broadcast(grad, src=0, group=group)


def via_host(grad: torch.Tensor, host_group) -> None:
    """:func:`gather` through host memory: to the CPU, summed there, back to the device."""
    host = grad.cpu()
    gather(host, host_group)
    grad.copy_(host)


def ring(grad: torch.Tensor) -> None:
    """The work split across all workers: all-reduce (reduce-scatter + all-gather)."""
    dist.all_reduce(grad)


def update_share(param: torch.Tensor, grad: torch.Tensor, servers: int, rank: int) -> None:
    """One SGD step on this worker's 1/``servers`` share of the parameters (none for a rank
    that is not a server)."""
    if rank < servers:
        share = param.tensor_split(servers)[rank]
        share.sub_(grad.tensor_split(servers)[rank], alpha=LR)


STRATEGIES = ("gather", "host", "ring", "update.n1", "update.split", "update.split_x_n")


def measure(mb: int, repeats: int, device: torch.device, prefix: str = "ps") -> list[dict]:
    """Every strategy on a gradient of ``mb`` MB (float32) held by each worker, as metrics
    named ``{prefix}.*``; rank 0 returns them, the others an empty list."""
    rank, workers = dist.get_rank(), world_size()
    grad = torch.ones(mb * MB // 4, device=device)
    param = torch.zeros_like(grad)
    where = f"{workers} x {device.type}"
    # Every worker must create every group, used or not.
    host_group = dist.new_group(backend="gloo") if device.type == "cuda" else None
    runs = {
        "gather": lambda: gather(grad),
        "ring": lambda: ring(grad),
        "update.n1": lambda: update_share(param, grad, 1, rank),
        "update.split": lambda: update_share(param, grad, workers, rank),
    }
    if host_group is not None:
        runs["host"] = lambda: via_host(grad, host_group)
    times = {name: timed(fn, device, repeats) for name, fn in runs.items()}
    shares = [None] * workers
    dist.all_gather_object(shares, times["update.split"])
    times["update.split"] = [max(servers) for servers in zip(*shares)]
    times["update.split_x_n"] = [workers * t for t in times["update.split"]]
    rows = [metric(f"{prefix}.workers", workers, device=where)]
    for name, seconds in times.items():
        rows += [
            metric(f"{prefix}.{name}.median_s", statistics.median(seconds), "s", where),
            metric(f"{prefix}.{name}.iqr_s", iqr(seconds), "s", where),
        ]
    moved = 2 * (workers - 1) / workers * grad.numel() * grad.element_size() / 1e9
    bus = [moved / t for t in times["ring"]]
    rows += [
        metric(f"{prefix}.ring.busbw_gbps", statistics.median(bus), "GB/s", where),
        metric(f"{prefix}.ring.busbw_iqr_gbps", iqr(bus), "GB/s", where),
    ]
    if host_group is None:
        reason = "the workers are CPU processes: their gradients already live in host memory"
        rows += [not_applicable(f"{prefix}.host.{s}_s", reason, "s") for s in ("median", "iqr")]
    return rows if rank == 0 else []


def unmeasured_rows(reason: str, prefix: str = "ps") -> list[dict]:
    """The metrics of :func:`measure`, not measured here, for ``reason``."""
    timings = [
        not_applicable(f"{prefix}.{name}.{stat}_s", reason, "s")
        for name in STRATEGIES
        for stat in ("median", "iqr")
    ]
    return [
        not_applicable(f"{prefix}.workers", reason),
        not_applicable(f"{prefix}.ring.busbw_gbps", reason, "GB/s"),
        not_applicable(f"{prefix}.ring.busbw_iqr_gbps", reason, "GB/s"),
        *timings,
    ]
