"""Concise implementation for multiple GPUs (``mgpuc.*``): the modified ResNet-18 trained with
``torch.optim.SGD``, one process per device with DistributedDataParallel in place of the
book's DataParallel (which :mod:`d2lrepro.multidevice.single_process` runs as written).

BatchNorm is per worker, as in DataParallel's replicas: batch statistics come from the
worker's shard, and DDP's buffer broadcast makes rank 0's running statistics everyone's, as
DataParallel keeps those of device 0.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

from d2lrepro.core.devices import world_size
from d2lrepro.core.models import init_normal_, resnet18


def concise_setup(
    seed: int, lr: float, device: torch.device, momentum: float = 0.0, weight_decay: float = 0.0
):
    """This worker's ResNet-18 (the book's Normal(0, 0.01) init), its optimizer, and
    ``step(x, y, global_batch)`` on this worker's shard (see :func:`ddp_setup`)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # PyTorch's default init of biases and BatchNorm
        net = resnet18()
    init_normal_(net, seed).to(device)
    return ddp_setup(net, lr, device, momentum, weight_decay)


def ddp_setup(
    net: nn.Module,
    lr: float,
    device: torch.device,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    bucket_cap_mb: float | None = None,
):
    """``net`` (already on ``device``), its SGD optimizer and ``step(x, y, global_batch)``
    through DDP, whose gradients are all-reduced in buckets of ``bucket_cap_mb`` MiB (DDP's
    default if None) as the backward pass makes them; returns the logits and the shard's
    summed loss. With one worker the net is not wrapped in DDP."""
    model = net
    if dist.is_initialized():
        ids = [device.index] if device.type == "cuda" else None
        model = DistributedDataParallel(net, device_ids=ids, bucket_cap_mb=bucket_cap_mb)
    optimizer = torch.optim.SGD(
        net.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay
    )
    world = world_size()

    def step(x, y, global_batch):
        optimizer.zero_grad(set_to_none=True)
        y_hat = model(x)
        loss = F.cross_entropy(y_hat, y, reduction="sum")
        # DDP averages gradients over workers; this scale makes the average the gradient of the
        # mean loss over the global batch (what DataParallel computes), even for uneven shards.
        (loss * (world / global_batch)).backward()
        optimizer.step()
        return y_hat.detach(), loss.detach()

    return net, optimizer, step


def all_reduce_grads(params) -> None:
    """What a DDP step sends: one all-reduce of all the gradients, packed into one buffer (the
    cost model's t2 of the DDP steps)."""
    grads = [p.grad for p in params if p.grad is not None]
    if world_size() == 1 or not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    for grad, part in zip(grads, flat.split([g.numel() for g in grads])):
        grad.copy_(part.view_as(grad))
