"""Why a run or a claim lacks hardware, in one phrasing, and the group it is counted in.

A *device* is a GPU where the job could use GPUs, else one CPU core (a worker process pinned
to it, with one thread); the devices of a run are all of one kind. So "2 devices" lacks the
same on a 1-GPU machine (its cores do not stand in for a second GPU) and on a 1-core one,
and is said the same way: "needs 2 devices, the job that measured it could use 1 (1 GPU)".
What needs CUDA ("needs CUDA", "needs 2 GPUs") differs only where the job could use no GPU:
cores cannot meet it. Free of torch, so that the evaluator and the report read these
reasons without starting it.
"""

from __future__ import annotations

import os
import re

WHO = "the job that measured it"
# Each shortfall's phrase, and the group it is counted in ({n}: the number it needs).
GROUPS = (
    (r"needs CUDA\b", "need a GPU"),
    (r"needs (\d+) GPUs\b", "need {n} GPUs"),
    (r"needs (\d+) devices\b", "need {n} devices"),
    (r"needs (\d+) CPU cores\b", "need {n} CPU cores"),
    (r"needs (\d+) nodes\b", "need {n} nodes"),
)


def reason(
    workers: int = 1,
    cuda: int = 0,
    have_cuda: int = 0,
    cores: int = 1,
    need_cores: int = 0,
    host: str = "",
) -> str:
    """Why a job that could use ``have_cuda`` GPUs and ``cores`` CPU cores (on ``host``,
    where named) cannot run ``workers`` devices, at least ``cuda`` of them GPUs, with
    ``need_cores`` cores at once; "" when it can."""
    who = f"{WHO} (on {host}) could use" if host else f"{WHO} could use"
    if need_cores > cores:
        return f"needs {need_cores} CPU cores, {who} {cores}"
    if cuda and not have_cuda:
        return f"needs {'CUDA' if cuda == 1 else f'{cuda} GPUs'}, {who} none"
    need, have = max(workers, cuda), have_cuda or cores
    if need <= have:
        return ""
    kind = "GPU" if have_cuda else "CPU core"
    return f"needs {need} devices, {who} {have} ({have} {kind}{'s' if have != 1 else ''})"


def usable_cores() -> int:
    """The cores this process may use: its affinity, as a cgroup or ``taskset`` narrows it."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def group(text: str) -> str:
    """The group a reason's shortfall is counted in ("need 2 devices", "need a GPU"); "" for
    a reason that names no missing hardware."""
    for pattern, name in GROUPS:
        if found := re.search(pattern, text):
            return name.format(n=found.group(1) if found.groups() else "")
    return ""


def devices_needed(name: str) -> int:
    """How many devices of either kind a group needs ("need 2 devices": 2); 0 for a group
    of another shortfall."""
    found = re.fullmatch(r"need (\d+) devices", name)
    return int(found.group(1)) if found else 0


def needs_gpus(name: str) -> bool:
    """Whether a group lacks GPUs that cores cannot stand in for ("need a GPU", "need 2
    GPUs")."""
    return bool(re.fullmatch(r"need (a GPU|\d+ GPUs)", name))
