"""This process as one worker of a multi-device run: its rank in its log lines, its own GPU or
a pinned CPU core, and under ``torchrun`` the run's process group. Every program a run starts
joins its run through :func:`joined`: the training worker
(:mod:`~d2lrepro.multidevice.parts.worker`) and the experiments that measure without training
(:mod:`~d2lrepro.multidevice.cost_model`, :mod:`~d2lrepro.multidevice.parameter_server`)."""

from __future__ import annotations

import contextlib
import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from d2lrepro.core.devices import device_for, node_workers, pin_to_core, shares_gpus


def backend(device: torch.device) -> str:
    """The process group's backend for a worker on ``device``: NCCL where each worker has a GPU
    of its own; gloo on a CPU core, and where the workers share GPUs
    (:func:`~d2lrepro.core.devices.shares_gpus`): NCCL refuses two ranks on one GPU, and gloo
    all-reduces, reduces and broadcasts CUDA tensors through host memory."""
    return "nccl" if device.type == "cuda" and not shares_gpus(node_workers()) else "gloo"


def join(device: torch.device, timeout: timedelta) -> None:
    """Join the run's process group (:func:`backend`) and run one collective: on NCCL the
    communicator forms now, on ``device`` (``device_id``), and the first collective's set-up
    is paid here, not by the first timed epoch."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if backend(device) == "nccl":
        dist.init_process_group("nccl", timeout=timeout, device_id=device)
    else:
        dist.init_process_group("gloo", timeout=timeout)
    dist.barrier()  # on NCCL an all-reduce on ``device``, waited for


@contextlib.contextmanager
def joined(timeout: float):
    """This process as one worker of a run, for the ``with`` block: its log lines carry its
    rank, its device is its own GPU or a pinned core, and under torchrun (``WORLD_SIZE`` set)
    it is in the run's process group, whose collectives wait ``timeout`` seconds at most for
    the other workers. Yields (device, rank)."""
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s rank {rank} %(levelname)s: %(message)s"
    )
    # Devices are per node: a run over 2 nodes of 4 GPUs uses cuda:0..3 on each.
    device = device_for(local_rank, node_workers())
    if device.type == "cpu":
        pin_to_core(local_rank)
    if "WORLD_SIZE" in os.environ:
        join(device, timedelta(seconds=timeout))
    yield device, rank
    if dist.is_initialized():
        dist.destroy_process_group()
