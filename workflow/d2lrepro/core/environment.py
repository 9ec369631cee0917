"""What this machine is: the facts every timing and verdict is read against."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_facts() -> list[tuple[str, int]]:
    """Name and memory (MiB) of each CUDA device this process may use; starts CUDA."""
    import torch

    from d2lrepro.core.devices import cuda_count

    return [
        (torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).total_memory >> 20)
        for i in range(cuda_count())
    ]


def gpu_facts_in_a_child() -> list[tuple[str, int]]:
    """:func:`gpu_facts`, read by a child process, so that this one never starts CUDA (a
    launcher whose workers use the GPUs must not hold a context on them: a GPU whose compute
    mode admits one process would refuse its worker)."""
    code = (
        "import json; from d2lrepro.core import environment as e; print(json.dumps(e.gpu_facts()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    return [tuple(fact) for fact in json.loads(done.stdout)]


def describe(threads: int | None = None, cuda_in_a_child: bool = False) -> dict:
    """The machine as this process sees it: its host, the cores it may use (affinity, as a
    cgroup or ``taskset`` narrows it), ``threads`` (a job's: those it was given), the CUDA
    devices it may use (those CUDA_VISIBLE_DEVICES leaves it, read by a child process with
    ``cuda_in_a_child``) and the versions."""
    # Here, not at the top: the report and the summaries read footers only, and importing
    # torch costs each of those jobs a second.
    import torch

    from d2lrepro.core.devices import cuda_count, usable_cores

    count = cuda_count()
    cuda = count > 0
    facts = (gpu_facts_in_a_child() if cuda_in_a_child else gpu_facts()) if cuda else []
    return {
        "host": platform.node(),
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cores": usable_cores(),
        "threads": threads,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "cuda_available": cuda,
        "cuda_version": torch.version.cuda if cuda else None,
        "cuda_devices": count,
        "gpus": [name for name, _ in facts],
        "gpu_memory_mib": [mib for _, mib in facts],
    }


def as_given(machine: dict, gpus: int, threads: int | None) -> dict:
    """This machine as a job given ``gpus`` of its GPUs and ``threads`` would describe it,
    without starting torch: how a job that the run's plan found short of devices records it.
    What this process sees of the host is read here; the GPUs and versions come from
    ``machine`` (the run's :func:`describe` record) where it describes this host, else from
    :func:`describe` itself (a results tree moved to another host)."""
    if machine.get("host") != platform.node():
        machine = describe(threads, cuda_in_a_child=True)
    from d2lrepro.core.shortfall import usable_cores

    return machine | {
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cores": usable_cores(),
        "threads": threads,
        "cuda_available": gpus > 0,
        "cuda_version": machine["cuda_version"] if gpus else None,
        "cuda_devices": gpus,
        "gpus": machine["gpus"][:gpus],
        "gpu_memory_mib": machine["gpu_memory_mib"][:gpus],
    }


def summary(env: dict) -> str:
    """The machine in one line, for logs (a figure's footer names the devices too:
    :func:`d2lrepro.core.provenance.footer`)."""
    gpus = ", ".join(env["gpus"]) if env["gpus"] else "no GPU"
    host = f"{env['host']}: " if env.get("host") else ""
    cpu = f"{env['cpu_model']} ({env['usable_cores']} cores)"
    return f"{host}{cpu}, {gpus}, torch {env['torch_version']}"


def git_commit(directory: Path) -> str:
    """The commit of the workflow, with '+changes' if the tree differs from it."""

    def git(*args):
        return subprocess.run(
            ["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10
        )

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode:
            return "unknown (not a git checkout)"
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return head.stdout.strip() + (" +changes" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (git not available)"
