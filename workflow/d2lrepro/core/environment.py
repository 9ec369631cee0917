"""What this machine is: the facts every timing and verdict is read against."""

from __future__ import annotations

import json
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


def describe() -> dict:
    """The machine, the devices torch sees and the versions."""
    # Here, not at the top: the report and the summaries read footers only, and importing
    # torch costs each of those jobs a second.
    import torch

    from d2lrepro.core.devices import cuda_count, usable_cores

    count = cuda_count()
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
    cores = f"{env['usable_cores']} cores{used}"
    return f"{env['cpu_model']} ({cores}), {gpus}, torch {env['torch_version']}"


def footer(path: Path, threads: int | None = None, if_no_gpu: bool = False) -> str:
    """:func:`summary` of the ``environment.json`` at ``path``; with ``if_no_gpu`` the thread
    count is stated only where there is no GPU (it describes CPU devices, not GPU runs)."""
    env = json.loads(Path(path).read_text())
    return summary(env, None if if_no_gpu and env["gpus"] else threads)


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
