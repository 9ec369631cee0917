"""What this machine has (NVLink between its GPUs too), which device a worker uses, and why a
run cannot happen here.

A *device* is a CUDA GPU on a machine with GPUs, and one worker process pinned to one core
with one thread on a machine without. Every "not applicable here" reason of the package that
lacks a device comes from :func:`unavailable`, in the one phrasing of
:mod:`d2lrepro.core.shortfall`. A run whose claims are about the algorithm, not the GPUs' speed
(data-parallel training, the printed examples), may run more workers than the job has GPUs:
its launcher lets them share the GPUs (:data:`SHARE_GPUS`), "2 workers sharing 1 GPU". Any
other worker started with more workers than GPUs (tests, the speed benchmark) falls back to a
pinned core rather than asking for a GPU that is not there.
"""

from __future__ import annotations

import ctypes
import os

import torch

from d2lrepro.core import shortfall
from d2lrepro.core.shortfall import usable_cores

NVML_P2P_CAPS_INDEX_NVLINK, NVML_P2P_STATUS_OK = 2, 0  # nvml.h
# Set ("1") by the launcher for the workers of a run that may share the job's GPUs
# (parts.launcher.launch's share_gpus), and inherited by them.
SHARE_GPUS = "D2LREPRO_SHARE_GPUS"


def cuda_count() -> int:
    """How many CUDA devices this process can use (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def machine_devices() -> int:
    """The devices this machine can give a run's workers: its GPUs, else its usable cores."""
    return cuda_count() or usable_cores()


def shares_gpus(workers: int) -> bool:
    """Whether ``workers`` workers of this node share the job's GPUs: their launcher allows it
    (:data:`SHARE_GPUS`) and the job has GPUs, fewer than workers."""
    return os.environ.get(SHARE_GPUS) == "1" and 0 < cuda_count() < workers


def worker_kind(workers: int) -> str:
    """ "cuda" when every one of ``workers`` can have its own GPU, or they share the job's GPUs
    (:func:`shares_gpus`), else "cpu"."""
    return "cuda" if 0 < workers <= cuda_count() or shares_gpus(workers) else "cpu"


def unavailable(workers: int = 1, cuda: int = 0, share: bool = False) -> str:
    """Why a run needing ``workers`` devices, at least ``cuda`` of them CUDA devices, cannot
    happen in this job; "" when it can (:func:`d2lrepro.core.shortfall.reason`, the one
    phrasing of a missing device). The job's GPUs are those CUDA_VISIBLE_DEVICES leaves it
    where that is set (a job's GPU lock, at most what ``--resources gpu=N`` gave it; SLURM's
    allocation), its cores those its affinity leaves it: the reason counts what the job could
    use, not what the machine has. With GPUs its devices are GPUs, so that 1 and 2 devices
    are always of one kind: with one GPU, 2 devices are not applicable, whatever the cores;
    unless the run may ``share`` its GPUs and needs no ``cuda`` of its own (:data:`SHARE_GPUS`):
    then a job with a GPU runs its workers on it."""
    if share and not cuda and cuda_count():
        return ""
    return shortfall.reason(workers, cuda, cuda_count(), usable_cores())


def device_for(rank: int, workers: int) -> torch.device:
    """The device of worker ``rank`` of ``workers``: its own GPU where each worker can have
    one, a GPU it shares where they share the job's GPUs (:func:`shares_gpus`: one in turn
    each), else the CPU."""
    if worker_kind(workers) == "cuda":
        return torch.device("cuda", rank % cuda_count())
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
    """The devices a run used, in words: "2 x NVIDIA H100 80GB HBM3", "2 x CPU core", or,
    where workers share GPUs, "2 workers sharing 1 GPU (NVIDIA H200)"."""
    gpus = list(dict.fromkeys(d for d in devices if d.type == "cuda"))
    if len(gpus) < sum(d.type == "cuda" for d in devices):
        names = " + ".join(dict.fromkeys(map(torch.cuda.get_device_name, gpus)))
        plural = "s" if len(gpus) != 1 else ""
        return f"{len(devices)} workers sharing {len(gpus)} GPU{plural} ({names})"
    names = [torch.cuda.get_device_name(d) if d.type == "cuda" else "CPU core" for d in devices]
    return " + ".join(f"{names.count(n)} x {n}" for n in dict.fromkeys(names))


def devices_used(devices: list[torch.device]) -> int:
    """How many devices a run's workers (their ``devices``) ran on: each GPU once, however
    many workers share it, and each CPU worker, which has a core of its own."""
    return len(set(d for d in devices if d.type == "cuda")) + sum(d.type == "cpu" for d in devices)


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
