"""The cost model of a synchronous data-parallel step (the from-scratch multi-GPU section):
computation t1 against communication t2, and the step as measured, per batch size."""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from .devices import describe, run_devices, world_size
from .multigpu_scratch import sync_grads
from .timing import Clock

COST_COLUMNS = [
    "model",
    "batch_per_device",
    "t1",
    "t2",
    "max_t1_t2",
    "measured_step",
    "params",
    "devices",
    "world_size",
]
WARMUP = 2  # untimed calls before each cost-model measurement

log = logging.getLogger(__name__)


def _median_seconds(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    """Median wall time of ``fn`` over ``repeats`` calls after :data:`WARMUP` untimed ones; all
    workers start each call together."""
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(repeats):
        if world_size() > 1:
            dist.barrier()
        with Clock(device) as clock:
            fn()
        times.append(clock.seconds)
    return statistics.median(times)


def cost_model(
    model: str, net: nn.Module, step, batches, repeats: int, seed: int, device: torch.device
) -> list[dict]:
    """The section's cost model of a data-parallel step of ``net`` (trained by ``step``, as
    :func:`d2lrepro.multigpu_run.build` makes them), per per-device batch size ``b``.

    ``t1``: forward and backward of ``b`` random examples on one device (every worker at once,
    as in a real step, rank 0's time reported); ``t2``: one :func:`sync_grads` of all ``m``
    gradients between the workers (0 work with one worker); ``measured_step``: a full training
    step on all workers with a global batch of ``b * world_size``. For ResNet-18 that step
    syncs through DDP's bucketed, overlapped all-reduce rather than :func:`sync_grads`. One
    row per batch size (:data:`COST_COLUMNS`).
    """
    world = world_size()
    params = list(net.parameters())
    generator = torch.Generator().manual_seed(seed)
    devices = describe(run_devices(world))
    rows = []
    for b in batches:
        x = torch.rand((b, 1, 28, 28), generator=generator).to(device)
        y = torch.randint(0, 10, (b,), generator=generator).to(device)

        def forward_backward():
            net.zero_grad()
            F.cross_entropy(net(x), y, reduction="sum").backward()

        t1 = _median_seconds(forward_backward, repeats, device)
        t2 = _median_seconds(lambda: sync_grads(params), repeats, device)
        measured = _median_seconds(lambda: step(x, y, b * world), repeats, device)
        rows.append(
            {
                "model": model,
                "batch_per_device": b,
                "t1": t1,
                "t2": t2,
                "max_t1_t2": max(t1, t2),
                "measured_step": measured,
                "params": sum(p.numel() for p in params),
                "devices": devices,
                "world_size": world,
            }
        )
        log.info("batch %d per device: t1 %.4f s, t2 %.4f s, step %.4f s", b, t1, t2, measured)
    return rows
