"""Training on multiple GPUs, from scratch, one process per device: the book's allreduce on
``torch.distributed`` and the from-scratch LeNet's training step. The book's own one-process
code is :mod:`d2lrepro.multigpu_book`."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn import functional as F

from .devices import world_size
from .models import ScratchLeNet


def dist_allreduce_(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over all workers, in place, the book's way: reduce onto rank 0, then
    broadcast from it. Without a process group (one worker) nothing is sent."""
    if world_size() > 1:
        dist.reduce(tensor, dst=0)
        dist.broadcast(tensor, src=0)
    return tensor


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


def scratch_setup(seed: int, lr: float, device: torch.device):
    """This worker's from-scratch LeNet, no optimizer, and ``step(x, y, global_batch)``: the
    summed cross-entropy of this worker's shard, gradients summed over the workers, and
    ``p -= lr * grad / global_batch`` (``d2l.sgd``); returns the logits and the shard's loss."""
    net = ScratchLeNet(seed).to(device)
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
