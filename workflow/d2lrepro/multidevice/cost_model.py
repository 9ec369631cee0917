"""The cost model of a synchronous data-parallel step (``mgpu.cost_model``):
computation t1 against communication t2, and the step as measured, per batch size, for three
steps (:data:`STEPS`): the from-scratch LeNet, which computes all its gradients and then
synchronizes them, and LeNet and ResNet-18 through DDP, which all-reduces buckets of gradients
while the backward pass still runs."""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.nn import functional as F

from d2lrepro.core.devices import describe, place, run_devices, world_size
from d2lrepro.core.models import ScratchLeNet
from d2lrepro.core.timing import Clock
from d2lrepro.multidevice.concise import concise_setup, ddp_setup
from d2lrepro.multidevice.scratch import scratch_setup, sync_grads

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
# LeNet's 0.5 MB of gradients in DDP buckets of 0.1 MiB: the fully connected layers' buckets,
# ready first, are all-reduced while the convolutions' backward runs (one bucket of DDP's
# default 25 MiB would wait for the whole backward pass).
LENET_BUCKET_MB = 0.1
STEPS = ("lenet", "lenet_ddp", "resnet18")

log = logging.getLogger(__name__)


def all_reduce_grads(params) -> None:
    """What a DDP step sends: one all-reduce of all the gradients, packed into one buffer."""
    grads = [p.grad for p in params if p.grad is not None]
    if world_size() == 1 or not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    for grad, part in zip(grads, flat.split([g.numel() for g in grads])):
        grad.copy_(part.view_as(grad))


def setup(name: str, seed: int, lr: float, device: torch.device):
    """Step ``name`` of :data:`STEPS`: the network, ``step(x, y, global_batch)`` and
    ``communicate(params)``, the communication that step does."""
    if name == "lenet":
        net, _, step = scratch_setup(seed, lr, device)
        return net, step, sync_grads
    if name == "lenet_ddp":
        net = place(ScratchLeNet(seed), device)
        _, _, step = ddp_setup(net, lr, device, bucket_cap_mb=LENET_BUCKET_MB)
        return net, step, all_reduce_grads
    if name == "resnet18":
        net, _, step = concise_setup(seed, lr, device)
        return net, step, all_reduce_grads
    raise ValueError(f"no cost-model step {name!r}: one of {STEPS}")


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
    model: str, batches, repeats: int, seed: int, lr: float, device: torch.device
) -> list[dict]:
    """The section's cost model of step ``model`` (:func:`setup`), per per-device batch size
    ``b``.

    ``t1``: forward and backward of ``b`` random examples on one device, without any
    communication (every worker at once, as in a real step, rank 0's time reported); ``t2``:
    the step's communication of all gradients between the workers (0 work with one worker);
    ``measured_step``: the full training step on all workers with a global batch of
    ``b * world_size``. One row per batch size (:data:`COST_COLUMNS`).
    """
    net, step, communicate = setup(model, seed, lr, device)
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
        t2 = _median_seconds(lambda: communicate(params), repeats, device)
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
