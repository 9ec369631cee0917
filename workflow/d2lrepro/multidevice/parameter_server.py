"""Parameter servers (the book's §13.7; ``ps.*``): what synchronizing a fixed gradient volume costs
by each strategy the section compares, measured by the workers of a run on their own devices
(GPUs with NCCL, else CPU processes with gloo over loopback and shared memory).

- ``gather``: the book's "aggregate on one GPU": every worker sends its whole gradient to
  worker 0 (point-to-point sends, all at once), which sums them and sends the sum back to
  each the same way (not NCCL's pipelined reduce and broadcast, which split the work).
- ``host``: the same through host memory (copy to the CPU, gloo, copy back); on CPU workers
  the gradients already live there, so it is not applicable.
- ``ring``: the work split across all workers (all-reduce: reduce-scatter + all-gather
  around a ring, what NCCL and gloo do).
- ``push.n1`` / ``push.split``: every worker sends its whole gradient to one server (worker
  0), against each worker sending a 1/n share to each of n servers, one on each worker's
  device (point-to-point sends and receives). A push is done when its slowest worker is: each
  repeat's time is the maximum over the workers. ``push.split_x_n`` is n times
  ``push.split``: the book's O(m/n) makes it at most ``push.n1``. ``ring_x_n`` is n times
  ``ring``: the book's arithmetic makes it about ``gather``.

Each sample times a block of back-to-back calls, as many as take :data:`SAMPLE_S` (one where a
call takes that long, as 160 MB does on CPU processes), and divides by their number: the fixed
cost of a sample (the barrier's release, a launch, the wait for the device) would otherwise be
charged in full to each call, n times over in ``push.split_x_n``.

Metrics, under a ``prefix`` per run (``ps`` for 2 workers, ``ps.all`` for all the devices):
``{gather,host,ring,ring_x_n,push.n1,push.split,push.split_x_n}.{median,iqr}_s``,
``ring.busbw_gbps`` and ``ring.busbw_iqr_gbps`` (the ring's bus bandwidth, 2(N-1)/N of the
gradient's bytes per second, median and IQR over the repeats), the same two as
``ring_nvlink.*`` where NVML reports NVLink between every pair of the workers' GPUs (else
not applicable), and ``workers``.

Each worker of a launch runs this module (``python -m d2lrepro.multidevice.parameter_server``
under ``torchrun``) and joins the run as a training worker does
(:func:`d2lrepro.multidevice.parts.process_group.joined`); rank 0 writes the metrics.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from d2lrepro.core.results import METRIC_COLUMNS, iqr, metric, not_applicable, write_metrics

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

MB = 10**6
# Seconds of back-to-back calls per sample, and the most calls: a fixed cost per sample of
# some 50 µs then weighs 0.1% at most, except on calls that take under 12 µs.
SAMPLE_S, MAX_CALLS = 0.05, 4096


def timed(
    fn: Callable[[], object],
    device: torch.device,
    repeats: int,
    calls: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Seconds per call of ``fn`` in each of ``repeats`` blocks of ``calls`` back-to-back
    calls, every worker starting a block together (a barrier) and its clock stopping once
    ``device`` has finished: the block's fixed cost is divided by ``calls``."""
    import torch.distributed as dist

    from d2lrepro.core import devices

    times = []
    for _ in range(repeats):
        devices.synchronize(device)
        dist.barrier()
        start = clock()
        for _ in range(calls):
            fn()
        devices.synchronize(device)
        times.append((clock() - start) / calls)
    return times


def calls_per_sample(
    fn: Callable[[], object],
    device: torch.device,
    target: float = SAMPLE_S,
    most: int = MAX_CALLS,
    clock: Callable[[], float] = time.perf_counter,
) -> int:
    """After one warm-up call of ``fn``, the fewest back-to-back calls (doubling from 1, at
    most ``most``) that take ``target`` seconds on the slowest worker: every worker makes the
    same number, as each call is a collective."""
    import torch
    import torch.distributed as dist

    fn()
    calls = 1
    while calls < most:
        block = torch.tensor([timed(fn, device, 1, calls, clock)[0] * calls], device=device)
        dist.all_reduce(block, op=dist.ReduceOp.MAX)
        if block.item() >= target:
            break
        calls = min(2 * calls, most)
    return calls


def gather(grad: torch.Tensor, received: dict[int, torch.Tensor], rank: int, group=None) -> None:
    """The book's aggregation on one device, in place: every worker sends its gradient to
    worker 0, into ``received`` (:func:`inbox` with one server), and worker 0 sums them into
    its own and sends the sum back to each (point-to-point sends, all at once)."""
    import torch.distributed as dist

    push(grad, 1, rank, received, group)
    if rank == 0:
        for buffer in received.values():
            grad += buffer
        ops = [dist.P2POp(dist.isend, grad, w, group) for w in received]
    else:
        ops = [dist.P2POp(dist.irecv, grad, 0, group)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


def via_host(grad: torch.Tensor, received: dict[int, torch.Tensor], rank: int, host_group) -> None:
    """:func:`gather` through host memory (``received`` there too): to the CPU, summed there,
    back to the device."""
    host = grad.cpu()
    gather(host, received, rank, host_group)
    grad.copy_(host)


def ring(grad: torch.Tensor) -> None:
    """The work split across all workers: all-reduce (reduce-scatter + all-gather)."""
    import torch.distributed as dist

    dist.all_reduce(grad)


def inbox(grad: torch.Tensor, servers: int, rank: int, workers: int) -> dict[int, torch.Tensor]:
    """Where server ``rank`` receives its share of every other worker's gradient (nothing on a
    worker that is not a server)."""
    import torch

    if rank >= servers:
        return {}
    share = grad.tensor_split(servers)[rank]
    return {w: torch.empty_like(share) for w in range(workers) if w != rank}


def push(
    grad: torch.Tensor, servers: int, rank: int, received: dict[int, torch.Tensor], group=None
) -> None:
    """Send share s of this worker's gradient to server s (worker s) for each of ``servers``
    servers, and receive into ``received`` (see :func:`inbox`), all at once; a server's own
    share stays where it is."""
    import torch.distributed as dist

    ops = [dist.P2POp(dist.irecv, buffer, w, group) for w, buffer in received.items()]
    ops += [
        dist.P2POp(dist.isend, share, s, group)
        for s, share in enumerate(grad.tensor_split(servers))
        if s != rank
    ]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


STRATEGIES = ("gather", "host", "ring", "ring_x_n", "push.n1", "push.split", "push.split_x_n")
BANDWIDTH = ("busbw_gbps", "busbw_iqr_gbps")


def _slowest(seconds: list[float]) -> list[float]:
    """Per repeat, the time of the worker that finished last."""
    import torch.distributed as dist

    from d2lrepro.core.devices import world_size

    everyone = [None] * world_size()
    dist.all_gather_object(everyone, seconds)
    return [max(repeat) for repeat in zip(*everyone)]


def measure(mb: int, repeats: int, device: torch.device, prefix: str = "ps") -> list[dict]:
    """Every strategy on a gradient of ``mb`` MB (float32) held by each worker, as metrics
    named ``{prefix}.*``; rank 0 returns them, the others an empty list."""
    import torch
    import torch.distributed as dist

    from d2lrepro.core.devices import gpu_uuids, nvlink_between, world_size

    rank, workers = dist.get_rank(), world_size()
    # Zeros: the sums of many back-to-back calls stay finite (the values cost nothing).
    grad = torch.zeros(mb * MB // 4, device=device)
    where = f"{workers} x {device.type}"
    # Every worker must create every group, used or not.
    host_group = dist.new_group(backend="gloo") if device.type == "cuda" else None
    to_one, to_all = inbox(grad, 1, rank, workers), inbox(grad, workers, rank, workers)
    runs = {
        "gather": lambda: gather(grad, to_one, rank),
        "ring": lambda: ring(grad),
        "push.n1": lambda: push(grad, 1, rank, to_one),
        "push.split": lambda: push(grad, workers, rank, to_all),
    }
    if host_group is not None:
        on_host = inbox(torch.empty_like(grad, device="cpu"), 1, rank, workers)
        runs["host"] = lambda: via_host(grad, on_host, rank, host_group)
    calls = {name: calls_per_sample(fn, device) for name, fn in runs.items()}
    times = {name: timed(fn, device, repeats, calls[name]) for name, fn in runs.items()}
    for name in ("push.n1", "push.split"):
        times[name] = _slowest(times[name])
    for name in ("ring", "push.split"):  # what the book's arithmetic compares: n times these
        times[f"{name}_x_n"] = [workers * t for t in times[name]]
        calls[f"{name}_x_n"] = calls[name]
    rows = [metric(f"{prefix}.workers", workers, device=where)]
    for name, seconds in times.items():
        n = calls[name]
        note = f"per call: {repeats} samples of {n} back-to-back call{'s' if n > 1 else ''}"
        rows += [
            metric(f"{prefix}.{name}.median_s", statistics.median(seconds), "s", where, note),
            metric(f"{prefix}.{name}.iqr_s", iqr(seconds), "s", where, note),
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


def launch(spec: dict, out, timeout: float, log_path, shortfall: dict | None = None) -> None:
    """The parameter-server timings of ``spec`` (mb, repeats, max_devices) on 2 workers
    (metrics ``ps.*``) and on all the machine's devices, at most ``max_devices`` (``ps.all.*``),
    one launch each, written together to ``out``; what cannot run here says why, as the job
    finds it, or, where the run's plan found the job short of devices (``shortfall``: the GPUs
    it would have locked), as the job would have found it, without starting torch."""
    if shortfall:
        from d2lrepro.core import shortfall as lack

        def lacking(workers: int) -> str:
            return lack.reason(workers, have_cuda=shortfall["gpus"], cores=lack.usable_cores())

        devices = shortfall["gpus"] or lack.usable_cores()
    else:
        from d2lrepro.core.devices import machine_devices
        from d2lrepro.core.devices import unavailable as lacking

        devices = machine_devices()
    most = min(spec["max_devices"], devices)
    rows = []
    for workers, prefix in ((2, "ps"), (most, "ps.all")):
        reason = lacking(workers)
        if not reason and prefix == "ps.all" and most <= 2:
            limit = lacking(3) or f"parameter_server.max_devices is {spec['max_devices']}"
            reason = f"no more devices than the 2-worker run's ({limit})"
        if reason:
            rows += unmeasured_rows(reason, prefix)
            continue
        import pandas as pd

        from d2lrepro.multidevice.parts import launcher

        part = Path(out).with_suffix(f".{workers}.csv")
        point = {"mb": spec["mb"], "repeats": spec["repeats"], "prefix": prefix, "out": str(part)}
        argv = ["--param-server", json.dumps(point), "--timeout", str(timeout)]
        # The workers run this module's main: named here, its imports are the rule's inputs.
        launcher.launch(sys.modules[main.__module__], workers, argv, log_path)
        measured = pd.read_csv(part, dtype={c: str for c in METRIC_COLUMNS[2:]})
        rows += measured.fillna({c: "" for c in METRIC_COLUMNS[2:]}).to_dict("records")
        part.unlink()
    write_metrics(rows, out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m d2lrepro.multidevice.parameter_server",
        description="A worker of the parameter-server timings",
    )
    parser.add_argument(
        "--param-server",
        type=json.loads,
        metavar="JSON",
        required=True,
        help='the parameter-server strategies, {"mb": gradient MB, "repeats": N, '
        '"prefix": metric prefix, "out": CSV}',
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for peers")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    from d2lrepro.multidevice.parts.process_group import joined

    args = parse_args(argv)
    spec = args.param_server
    with joined(args.timeout) as (device, rank):
        rows = measure(spec["mb"], spec["repeats"], device, spec["prefix"])
        if rank == 0:
            write_metrics(rows, spec["out"])


def summarize(metrics_file, records: dict[str, dict], figure_path) -> None:
    """The section's figure of the timings in ``metrics_file`` (the experiment's metrics, which
    the claims read), its footer naming the machines that measured them (``records``)."""
    import pandas as pd

    from d2lrepro.multidevice.parts import figures, run_results  # only in the job that draws

    measured = pd.read_csv(metrics_file)
    figures.draw_param_server(measured, figure_path, run_results.footer(records, measured))
    unmeasured = int((measured["status"].fillna("") != "").sum()) if "status" in measured else 0
    log.info("%s: %d timings, %d not measured here", figure_path, len(measured), unmeasured)


if __name__ == "__main__":
    main()
