"""Training on multiple GPUs, from scratch (``mgpu.*``), one process per device: the book's
allreduce on ``torch.distributed``, the rows each worker takes of a batch, the from-scratch
LeNet's training step, how far the workers' replicas lie apart, the book's ``get_params`` and
the section's printed examples. The book's own one-process code
(:mod:`d2lrepro.multidevice.single_process`) takes its parameter copies from
:func:`get_params` too."""

from __future__ import annotations

import logging
import math

import torch
import torch.distributed as dist
from torch.nn import functional as F

from d2lrepro.core import models
from d2lrepro.core.devices import describe, place, run_devices, shares_gpus, world_size
from d2lrepro.core.results import metric, not_applicable

log = logging.getLogger(__name__)


def dist_allreduce_(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over all workers, in place, the book's way: reduce onto rank 0, then
    broadcast from it. Without a process group (one worker) nothing is sent."""
    if world_size() > 1:
        dist.reduce(tensor, dst=0)
        dist.broadcast(tensor, src=0)
    return tensor


def shard(batch: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Worker ``rank``'s rows of a global ``batch``: contiguous, nearly equal chunks, one per
    worker, the first ones a row longer (the book's ``split_batch``)."""
    return torch.tensor_split(batch, world)[rank]


def sync_grads(params) -> None:
    """Sum every parameter's gradient over the workers (not the mean) with one
    :func:`dist_allreduce_` of all of them packed into one flat buffer: a message costs gloo
    a fixed overhead, so one reduce and one broadcast beat one of each per parameter."""
    grads = [p.grad for p in params if p.grad is not None]
    if world_size() == 1 or not grads:
        return
    flat = dist_allreduce_(torch.cat([g.reshape(-1) for g in grads]))
    for grad, part in zip(grads, flat.split([g.numel() for g in grads])):
        grad.copy_(part.view_as(grad))


def replica_gap(params) -> float:
    """How far the workers' replicas lie apart (``mgpu.2gpu.replicas``): the largest absolute
    difference between any worker's ``params`` and rank 0's, over every element (valid on
    every worker; a collective: all call it). 0 where the replicas are identical, which the
    book's data parallelism keeps them; inf where a replica holds a NaN; NaN with one worker,
    which has nothing to compare."""
    if world_size() == 1:
        return math.nan
    mine = torch.cat([p.detach().reshape(-1) for p in params])
    first = mine.clone()
    dist.broadcast(first, src=0)
    # gloo's MAX keeps a number over a NaN: a NaN is made the largest gap before it.
    gap = torch.nan_to_num((mine - first).abs().max(), nan=math.inf).reshape(1)
    dist.all_reduce(gap, op=dist.ReduceOp.MAX)
    return gap.item()


def scratch_setup(seed: int, lr: float, device: torch.device):
    """This worker's from-scratch LeNet, no optimizer, and ``step(x, y, global_batch)``: the
    summed cross-entropy of this worker's shard, gradients summed over the workers, and
    ``p -= lr * grad / global_batch`` (``d2l.sgd``); returns the logits and the shard's loss."""
    net = place(models.ScratchLeNet(seed), device)
    params = list(net.parameters())

    def step(x, y, global_batch):
        y_hat = net(x)
        loss = F.cross_entropy(y_hat, y, reduction="none").sum()
        loss.backward()
        sync_grads(params)
        with torch.no_grad():
            for param in params:
                param -= lr * param.grad / global_batch
                param.grad.zero_()
        return y_hat.detach(), loss.detach()

    return net, None, step


def get_params(params: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """The book's ``get_params``: each parameter copied to ``device``, where it requires a
    gradient. The copies are detached first: our parameters already require one, and a copy
    of such a tensor would be no leaf and never receive its gradient."""
    new_params = [p.detach().to(device, copy=True) for p in params]
    for p in new_params:
        p.requires_grad_()
    return new_params


def params_example(device: torch.device) -> list[dict]:
    """The section's ``get_params`` cell: LeNet's parameters through the book's
    :func:`get_params` to ``device``, and what the book prints of b1
    (``b1 weight: tensor([0., …], device=…, requires_grad=True)``, ``b1 grad: None``), logged
    as printed: its zero entries, whether the print shows ``requires_grad=True``, whether it
    is on ``device``, and whether its grad is None."""
    b1 = get_params(models.lenet_params(), device)[1]
    printed = repr(b1)
    log.info("b1 weight: %s", printed)
    log.info("b1 grad: %s", b1.grad)
    where = str(device)
    return [
        metric("params.b1_zeros", int((b1 == 0).sum()), device=where),
        metric("params.b1_requires_grad", float("requires_grad=True" in printed), device=where),
        metric("params.b1_on_device", float(b1.device == device), device=where),
        metric("params.b1_grad_is_none", float(b1.grad is None), device=where),
    ]


# Why mgpu.scatter's rows are not measured without a GPU for each worker: no stand-in for the
# book's function would say anything of it.
NO_SCATTER = "needs a GPU for each worker: the book's nn.parallel.scatter sends a shard to each"


def book_scatter_rows(n: int, width: int, world: int) -> list[dict]:
    """The rows the book's ``nn.parallel.scatter`` gives each of ``world`` GPUs of an ``n`` x
    ``width`` batch, each row naming the device its shard landed on."""
    gpus = [torch.device("cuda", i) for i in range(world)]
    shards = torch.nn.parallel.scatter(torch.arange(n * width).reshape(n, width), gpus)
    return [
        metric(f"scatter.shard{i}.{end}_row", shard[k, 0].item() // width, device=str(shard.device))
        for i, shard in enumerate(shards)
        for end, k in (("first", 0), ("last", -1))
    ]


def printed_examples(device: torch.device) -> list[dict]:
    """The section's printed examples, made by 2 workers on their own devices: LeNet's fresh
    parameters copied to worker 0's device (:func:`params_example`), the allreduce of [[1, 1]]
    held by worker 0 and [[2, 2]] held by worker 1, and the rows each worker takes of a 4x5
    batch (the book's ``nn.parallel.scatter`` on worker 0 where each worker has a GPU of its
    own, else not applicable: :data:`NO_SCATTER`) and of the blog notes' 6x4 batch. Every
    worker returns every worker's rows, each naming its device, or, where the workers share a
    GPU, that they do (:func:`~d2lrepro.core.devices.describe`)."""
    rank, world = dist.get_rank(), world_size()
    if world != 2:
        raise ValueError(f"the printed examples need 2 workers, not {world}")
    where = describe(run_devices(world)) if shares_gpus(world) else str(device)
    rows = params_example(device) if rank == 0 else []
    held = dist_allreduce_(torch.full((1, 2), float(rank + 1), device=device))
    rows += [metric(f"allreduce.shard{rank}.{j}", held[0, j].item(), device=where) for j in (0, 1)]
    # Worker 0 sends a shard to each GPU, so it must see one for each worker (one node).
    own_gpus = device.type == "cuda" and not shares_gpus(world)
    if own_gpus and torch.cuda.device_count() >= world:
        rows += book_scatter_rows(4, 5, world) if rank == 0 else []
    else:
        ends = [f"scatter.shard{rank}.{end}_row" for end in ("first", "last")]
        rows += [not_applicable(m, NO_SCATTER, device=where) for m in ends]
    mine = shard(torch.arange(6 * 4, device=device).reshape(6, 4), rank, world)
    rows += [
        metric(f"split6x4.shard{rank}.{end}_row", mine[k, 0].item() // 4, device=where)
        for end, k in (("first", 0), ("last", -1))
    ]
    gathered = [None] * world
    dist.all_gather_object(gathered, rows)
    return [row for worker in gathered for row in worker]
