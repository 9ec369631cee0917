"""Parameter servers (the book's §15): what synchronizing a fixed gradient volume costs by
each strategy the section compares, measured by the workers of a run on their own devices
(GPUs with NCCL, else CPU processes with gloo over loopback and shared memory).

- ``gather``: every worker's gradient summed on worker 0, then the sum sent back to each
  (reduce + broadcast: the book's "aggregate on one GPU").
- ``host``: the same through host memory (copy to the CPU, gloo, copy back); on CPU workers
  the gradients already live there, so it is not applicable.
- ``ring``: the work split across all workers (all-reduce: reduce-scatter + all-gather
  around a ring, what NCCL and gloo do).
- ``push.n1`` / ``push.split``: every worker sends its whole gradient to one server (worker
  0), against each worker sending a 1/n share to each of n servers, one on each worker's
  device (point-to-point sends and receives). A push is done when its slowest worker is: each
  repeat's time is the maximum over the workers. ``push.split_x_n`` is n times
  ``push.split``: the book's O(m/n) makes it at most ``push.n1``.

Metrics, under a ``prefix`` per run (``ps`` for 2 workers, ``ps.all`` for all the devices):
``{gather,host,ring,push.n1,push.split,push.split_x_n}.{median,iqr}_s``,
``ring.busbw_gbps`` and ``ring.busbw_iqr_gbps`` (the ring's bus bandwidth, 2(N-1)/N of the
gradient's bytes per second, median and IQR over the repeats), the same two as
``ring_nvlink.*`` where NVML reports NVLink between every pair of the workers' GPUs (else
not applicable),
and ``workers``.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from d2lrepro.core.devices import synchronize, world_size
from d2lrepro.core.results import iqr, metric, not_applicable

MB = 10**6
NVML_P2P_CAPS_INDEX_NVLINK, NVML_P2P_STATUS_OK = 2, 0  # nvml.h


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


def inbox(grad: torch.Tensor, servers: int, rank: int, workers: int) -> dict[int, torch.Tensor]:
    """Where server ``rank`` receives its share of every other worker's gradient (nothing on a
    worker that is not a server)."""
    if rank >= servers:
        return {}
    share = grad.tensor_split(servers)[rank]
    return {w: torch.empty_like(share) for w in range(workers) if w != rank}


def push(grad: torch.Tensor, servers: int, rank: int, received: dict[int, torch.Tensor]) -> None:
    """Send share s of this worker's gradient to server s (worker s) for each of ``servers``
    servers, and receive into ``received`` (see :func:`inbox`), all at once; a server's own
    share stays where it is."""
    ops = [dist.P2POp(dist.irecv, buffer, w) for w, buffer in received.items()]
    ops += [
        dist.P2POp(dist.isend, share, s)
        for s, share in enumerate(grad.tensor_split(servers))
        if s != rank
    ]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


def nvlink_between(uuids: list[str], nvml=None) -> str:
    """Why the GPUs named ``uuids`` (NVML's "GPU-..." names) are not all joined by NVLink,
    or "" when NVML reports NVLink peer-to-peer between each pair."""
    try:
        nvml = nvml or ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as error:
        return f"NVML is not available to tell the GPUs' links: {error}"
    if nvml.nvmlInit_v2() != 0:
        return "NVML did not initialize: the GPUs' links are unknown"
    handles = []
    for uuid in uuids:
        handle = ctypes.c_void_p()
        if nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.pointer(handle)) != 0:
            return f"NVML does not know GPU {uuid}"
        handles.append(handle)
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            status = ctypes.c_int(-1)
            rc = nvml.nvmlDeviceGetP2PStatus(
                handles[i], handles[j], NVML_P2P_CAPS_INDEX_NVLINK, ctypes.pointer(status)
            )
            if rc != 0 or status.value != NVML_P2P_STATUS_OK:
                return f"no NVLink between GPU {i} and {j}"
    return ""


def gpu_uuids(count: int) -> list[str]:
    """NVML's names of this process's first ``count`` GPUs."""
    names = [str(torch.cuda.get_device_properties(i).uuid) for i in range(count)]
    return [n if n.startswith("GPU-") else f"GPU-{n}" for n in names]


STRATEGIES = ("gather", "host", "ring", "push.n1", "push.split", "push.split_x_n")
BANDWIDTH = ("busbw_gbps", "busbw_iqr_gbps")


def _slowest(seconds: list[float]) -> list[float]:
    """Per repeat, the time of the worker that finished last."""
    everyone = [None] * world_size()
    dist.all_gather_object(everyone, seconds)
    return [max(repeat) for repeat in zip(*everyone)]


def measure(mb: int, repeats: int, device: torch.device, prefix: str = "ps") -> list[dict]:
    """Every strategy on a gradient of ``mb`` MB (float32) held by each worker, as metrics
    named ``{prefix}.*``; rank 0 returns them, the others an empty list."""
    rank, workers = dist.get_rank(), world_size()
    grad = torch.ones(mb * MB // 4, device=device)
    where = f"{workers} x {device.type}"
    # Every worker must create every group, used or not.
    host_group = dist.new_group(backend="gloo") if device.type == "cuda" else None
    to_one, to_all = inbox(grad, 1, rank, workers), inbox(grad, workers, rank, workers)
    runs = {
        "gather": lambda: gather(grad),
        "ring": lambda: ring(grad),
        "push.n1": lambda: push(grad, 1, rank, to_one),
        "push.split": lambda: push(grad, workers, rank, to_all),
    }
    if host_group is not None:
        runs["host"] = lambda: via_host(grad, host_group)
    times = {name: timed(fn, device, repeats) for name, fn in runs.items()}
    for name in ("push.n1", "push.split"):
        times[name] = _slowest(times[name])
    times["push.split_x_n"] = [workers * t for t in times["push.split"]]
    rows = [metric(f"{prefix}.workers", workers, device=where)]
    for name, seconds in times.items():
        rows += [
            metric(f"{prefix}.{name}.median_s", statistics.median(seconds), "s", where),
            metric(f"{prefix}.{name}.iqr_s", iqr(seconds), "s", where),
        ]
    moved = 2 * (workers - 1) / workers * grad.numel() * grad.element_size() / 1e9
    bus = [moved / t for t in times["ring"]]
    rows += bandwidth_rows(f"{prefix}.ring", bus, where)
    if device.type == "cuda":
        linked = nvlink_between(gpu_uuids(workers)) if rank == 0 else ""
        rows += bandwidth_rows(f"{prefix}.ring_nvlink", bus, where, linked)
    else:
        why = "the workers are CPU processes: no GPUs, no NVLink"
        rows += bandwidth_rows(f"{prefix}.ring_nvlink", bus, where, why)
        reason = "the workers are CPU processes: their gradients already live in host memory"
        rows += [not_applicable(f"{prefix}.host.{s}_s", reason, "s") for s in ("median", "iqr")]
    return rows if rank == 0 else []


def bandwidth_rows(name: str, bus: list[float], where: str, unmeasured: str = "") -> list:
    """The median and IQR of the bus bandwidths ``bus``, or why they do not count here."""
    if unmeasured:
        return [not_applicable(f"{name}.{s}", unmeasured, "GB/s") for s in BANDWIDTH]
    values = (statistics.median(bus), iqr(bus))
    return [metric(f"{name}.{s}", v, "GB/s", where) for s, v in zip(BANDWIDTH, values)]


def unmeasured_rows(reason: str, prefix: str = "ps") -> list[dict]:
    """The metrics of :func:`measure`, not measured here, for ``reason``."""
    timings = [
        not_applicable(f"{prefix}.{name}.{stat}_s", reason, "s")
        for name in STRATEGIES
        for stat in ("median", "iqr")
    ]
    return [
        not_applicable(f"{prefix}.workers", reason),
        *bandwidth_rows(f"{prefix}.ring", [], "", reason),
        *bandwidth_rows(f"{prefix}.ring_nvlink", [], "", reason),
        *timings,
    ]
