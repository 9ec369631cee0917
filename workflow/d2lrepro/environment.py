"""What this machine is: the facts every timing and verdict is read against."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import torch


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cuda_devices() -> int:
    """How many CUDA devices this process can use (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def synchronize(*devices) -> None:
    """Block until each device has finished its queued work (CPU ops finish before they return)."""
    for device in map(torch.device, devices):
        if device.type == "cuda":
            torch.cuda.synchronize(device)


def describe() -> dict:
    count = cuda_devices()
    cuda = count > 0
    return {
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cores": usable_cores(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "cuda_available": cuda,
        "cuda_version": torch.version.cuda if cuda else None,
        "cuda_devices": count,
        "gpus": [torch.cuda.get_device_name(i) for i in range(count)],
    }


def summary(env: dict, threads: int | None = None) -> str:
    """One line for figure footers and logs; ``threads``: those the measurements ran with."""
    gpus = ", ".join(env["gpus"]) if env["gpus"] else "no GPU"
    used = f", {threads} thread{'s' if threads != 1 else ''}" if threads else ""
    return f"{env['cpu_model']} ({env['usable_cores']} cores{used}), {gpus}, torch {env['torch_version']}"


def git_commit(directory: Path) -> str:
    """The commit of the workflow, with '+changes' if the tree differs from it."""
    def git(*args):
        return subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10)

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode:
            return "unknown (not a git checkout)"
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return head.stdout.strip() + (" +changes" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (git not available)"
