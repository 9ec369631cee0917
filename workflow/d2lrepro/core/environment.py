"""What this machine is: the facts every timing and verdict is read against."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe(threads: int | None = None) -> dict:
    """The machine as this process sees it: its host, the cores it may use (affinity, as a
    cgroup or ``taskset`` narrows it), ``threads`` (a job's: those it was given), the CUDA
    devices it may use (those CUDA_VISIBLE_DEVICES leaves it) and the versions."""
    # Here, not at the top: the report and the summaries read footers only, and importing
    # torch costs each of those jobs a second.
    import torch

    from d2lrepro.core.devices import cuda_count, usable_cores

    count = cuda_count()
    cuda = count > 0
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
        "gpus": [torch.cuda.get_device_name(i) for i in range(count)],
        "gpu_memory_mib": [
            torch.cuda.get_device_properties(i).total_memory >> 20 for i in range(count)
        ],
    }


def summary(env: dict, threads: int | None = None) -> str:
    """One line for figure footers and logs; ``threads``: those the measurements ran with."""
    gpus = ", ".join(env["gpus"]) if env["gpus"] else "no GPU"
    used = f", {threads} thread{'s' if threads != 1 else ''}" if threads else ""
    cores = f"{env['usable_cores']} cores{used}"
    host = f"{env['host']}: " if env.get("host") else ""
    return f"{host}{env['cpu_model']} ({cores}), {gpus}, torch {env['torch_version']}"


def footer(records, threads: int | None = None, if_no_gpu: bool = False) -> str:
    """The machines of the jobs that measured a figure's data (:mod:`d2lrepro.core.machines`),
    one :func:`summary` each, the same ones once: with the threads each job was given, or
    ``threads`` where its numbers ran with fewer; with ``if_no_gpu`` the threads are stated
    only for jobs without a GPU (they describe CPU devices, not GPU runs)."""
    lines = [
        summary(r, None if if_no_gpu and r["gpus"] else threads or r.get("threads"))
        for r in records
    ]
    return "; ".join(dict.fromkeys(lines))


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
