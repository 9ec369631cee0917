"""What this machine has, which device a worker uses, and why a run cannot happen here.

A *device* is a CUDA GPU on a machine with GPUs, and one worker process pinned to one core
with one thread on a machine without. Every "not applicable here" reason of the package comes
from :func:`unavailable`. A worker started by hand with more workers than GPUs (tests, the
speed benchmark) falls back to a pinned core rather than asking for a GPU that is not there.
"""

from __future__ import annotations

import os

import torch


def cuda_count() -> int:
    """How many CUDA devices this process can use (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def machine_devices() -> int:
    """The devices this machine can give a run's workers: its GPUs, else its usable cores."""
    return cuda_count() or usable_cores()


def worker_kind(workers: int) -> str:
    """ "cuda" when every one of ``workers`` can have its own GPU, else "cpu"."""
    return "cuda" if 0 < workers <= cuda_count() else "cpu"


def unavailable(
    workers: int = 1,
    cuda: int = 0,
    have_cuda: int | None = None,
    cores: int | None = None,
    has: str | None = None,
) -> str:
    """Why a run needing ``workers`` devices and at least ``cuda`` CUDA devices cannot happen
    here; "" when it can. ``have_cuda`` and ``cores`` describe the machine (default: this
    one), e.g. as a job's machine record has it, and ``has`` says whose they are ("the job
    that measured it could use").

    A machine with GPUs runs its devices on GPUs, one without on pinned cores, so that 1 and
    2 devices are always of one kind: with one GPU, 2 devices are not applicable. This
    process's GPUs are those CUDA_VISIBLE_DEVICES leaves it where that is set (a job's GPU lock,
    at most what ``--resources gpu=N`` gave it; SLURM's allocation): the reason then counts
    what this job may use, not what the machine has."""
    given, has = has, has or "this machine has"
    if have_cuda is None:
        have_cuda = cuda_count()
        if "CUDA_VISIBLE_DEVICES" in os.environ:
            has = "this job may use"
    cores = usable_cores() if cores is None else cores
    if cuda and have_cuda < cuda:
        if cuda == 1:
            return f"needs CUDA, {has} none"
        return f"needs {cuda} CUDA devices, {has} {have_cuda}"
    if have_cuda:
        have, kind = have_cuda, "GPU"
    else:  # cores, which CUDA_VISIBLE_DEVICES does not narrow
        have, kind, has = cores, "usable core", given or "this machine has"
    if workers <= have:
        return ""
    return f"needs {workers} devices, {has} {have} {kind}{'s' if have != 1 else ''}"


def device_for(rank: int, workers: int) -> torch.device:
    """The device of worker ``rank`` of ``workers``: its own GPU where each worker can have
    one, else the CPU."""
    if worker_kind(workers) == "cuda":
        return torch.device("cuda", rank)
    return torch.device("cpu")


def node_workers() -> int:
    """Workers of this run on this node: torchrun's LOCAL_WORLD_SIZE, which differs from
    WORLD_SIZE when the run spans nodes (1 outside torchrun)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", 1)))


def run_devices(world: int) -> list[torch.device]:
    """The device of each of a run's ``world`` workers, as their nodes assign them (torchrun
    numbers the workers node by node)."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return [device_for(rank % local, local) for rank in range(world)]


def pin_to_core(rank: int) -> None:
    """Make this CPU worker one device: pin it to core ``rank`` (modulo the usable cores)
    and give torch one thread."""
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    torch.set_num_threads(1)


def place(net: torch.nn.Module, device: torch.device | str) -> torch.nn.Module:
    """``net`` moved to ``device``; on the CPU its 4-D weights also go channels-last, so that
    oneDNN picks its channels-last convolution and pooling kernels (a third more LeNet images/s
    on one core of the 2-core machine; the results agree with the default layout to rounding).
    GPUs keep the layout the book's code uses."""
    device = torch.device(device)
    if device.type == "cpu":
        return net.to(device, memory_format=torch.channels_last)
    return net.to(device)


def describe(devices: list[torch.device]) -> str:
    """The devices a run used, in words: "2 x NVIDIA H100 80GB HBM3" or "2 x CPU core"."""
    names = [torch.cuda.get_device_name(d) if d.type == "cuda" else "CPU core" for d in devices]
    return " + ".join(f"{names.count(n)} x {n}" for n in dict.fromkeys(names))


def synchronize(*devices) -> None:
    """Block until each device has finished its queued work (CPU ops finish before they
    return); only the devices named, so no CUDA context starts on a device a job does not use."""
    for device in map(torch.device, devices):
        if device.type == "cuda":
            torch.cuda.synchronize(device)


def world_size() -> int:
    """Workers in this run's process group (1 without one)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_initialized() else 1
