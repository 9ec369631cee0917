"""Data parallelism: the book's hand-written primitives, their one-process-per-device
counterparts on ``torch.distributed``, and what a "device" is on this machine.

A device is a CUDA GPU when there are GPUs; on a CPU-only machine it is one worker process
pinned to one core with one thread.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from d2lrepro.environment import usable_cores


def allreduce(data: list[torch.Tensor]) -> None:
    """The book's ``allreduce``: sum every tensor into ``data[0]``, then copy the sum back to
    each one, in place; the tensors may live on different devices."""
    for tensor in data[1:]:
        data[0][:] += tensor.to(data[0].device)
    for tensor in data[1:]:
        tensor[:] = data[0].to(tensor.device)


def split_batch(X: torch.Tensor, y: torch.Tensor, n: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The book's ``split_batch``: rows of ``X`` and ``y`` in ``n`` contiguous, nearly equal
    chunks (``torch.tensor_split``: always ``n`` chunks, the first ones one row longer)."""
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows, y has {y.shape[0]}")
    return list(torch.tensor_split(X, n)), list(torch.tensor_split(y, n))


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


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


def pin_to_core(rank: int) -> None:
    """On a CPU-only machine make this process one device: pin it to core ``rank`` (modulo the
    usable cores) and give torch one thread. With CUDA nothing changes."""
    if torch.cuda.is_available():
        return
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    torch.set_num_threads(1)


def device_for(rank: int) -> torch.device:
    return torch.device(f"cuda:{rank}") if torch.cuda.is_available() else torch.device("cpu")


def available_devices() -> tuple[int, str]:
    """How many devices this machine has and what they are ("GPU" or "usable core")."""
    if torch.cuda.is_available():
        return torch.cuda.device_count(), "GPU"
    return usable_cores(), "usable core"


def describe_devices(n: int) -> str:
    """``n`` devices in words, e.g. "2 x NVIDIA H100 80GB HBM3" or "2 x CPU core"."""
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU core"
    return f"{n} x {name}"


def applicability(requested_devices: int) -> str | None:
    """None if this machine has ``requested_devices`` devices, else why the run does not apply."""
    have, kind = available_devices()
    if requested_devices <= have:
        return None
    return f"needs {requested_devices} devices, this machine has {have} {kind}{'' if have == 1 else 's'}"


__all__ = ["allreduce", "split_batch", "world_size", "dist_allreduce_", "sync_grads", "pin_to_core",
           "device_for", "available_devices", "describe_devices", "applicability"]
