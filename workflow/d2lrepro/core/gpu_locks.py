"""Claiming GPUs for a job: Snakemake counts a job's GPUs but does not say which ones it gets,
so each GPU has a lock file on this host, held for the life of the process that locked it and
naming its holder. Timing jobs hold their GPUs alone; jobs that only train may share one.
A run started by hand inside a cluster allocation (``salloc``, ``srun``) locks the same way
among the allocation's GPUs; a job that a cluster executor submitted does not, since its own
allocation is its lock. Serves every section that runs on GPUs.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import logging
import os
import re
import socket
import tempfile
import time
from datetime import datetime
from pathlib import Path

GPU_LOCKS = Path(tempfile.gettempdir()) / f"d2lrepro-gpus-{os.getuid()}"
# Set by the workflow where Snakemake runs a job that a cluster executor submitted (it parses
# the workflow in its remote mode): the job's allocation already is its lock.
SUBMITTED = "D2LREPRO_SUBMITTED_JOB"
_held = []  # the lock files of this process's GPUs: a lock lasts as long as the process
# How long a job waits for GPUs that processes outside its Snakemake run hold (within one run,
# the `gpu` and `gpu_share` resources and the timing jobs' cores keep jobs from waiting on
# each other).
CLAIM_TIMEOUT_S = 600.0


def parse_visible_devices(value: str) -> list[str]:
    """The devices a CUDA_VISIBLE_DEVICES value names, as CUDA reads it: indices, or GPU- and
    MIG- UUIDs, up to the first entry that is neither (CUDA ignores it and the rest)."""
    names = []
    for entry in value.split(","):
        entry = entry.strip()
        if not (entry.isdigit() or entry.startswith(("GPU-", "MIG-"))):
            break
        names.append(entry)
    return names


def nvml_gpu_count(visible: str | None) -> int | None:
    """The GPUs torch counts before CUDA starts (``torch.cuda.device_count``), found without
    importing torch, which takes seconds where it has CUDA: NVML's count, cut to the
    CUDA_VISIBLE_DEVICES value ``visible`` (None: unset) as torch cuts it. None where torch
    alone can tell: ``visible`` holds an entry that is no index (a UUID, say), or NVML fails."""
    if visible is None:
        found = _nvml_device_count()
        return None if found is None else min(found, 64)  # torch looks for 64 at most
    entries = [entry.strip() for entry in visible.split(",")]
    if entries == [""]:
        return 0
    if not all(entry.isascii() and entry.isdigit() for entry in entries):
        return None
    ordinals = [int(entry) for entry in entries]
    if len(set(ordinals)) < len(ordinals):
        return 0  # CUDA shows no device where the list repeats one
    found = _nvml_device_count()
    if found is None:
        return None
    return next((i for i, ordinal in enumerate(ordinals) if ordinal >= found), len(ordinals))


def _nvml_device_count() -> int | None:
    """The GPUs NVML finds on this machine, asked as torch asks it; None where it cannot tell
    (no library, one without these functions, an error)."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        init, get_count, shutdown = nvml.nvmlInit, nvml.nvmlDeviceGetCount_v2, nvml.nvmlShutdown
    except (OSError, AttributeError):
        return None
    if init() != 0:
        return None
    count = ctypes.c_int(-1)
    try:
        ok = get_count(ctypes.byref(count)) == 0 and count.value >= 0  # else torch asks CUDA
        return count.value if ok else None
    finally:
        shutdown()


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them, found without
    starting CUDA, so that a lock can still narrow them. torch counts GPUs through NVML, but
    MIG instances only by starting CUDA: those are taken as listed."""
    import torch  # here: the workflow reads SUBMITTED when it is parsed

    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [str(i) for i in range(torch.cuda.device_count())]
    names = parse_visible_devices(listed)
    if names and names[0].startswith("MIG-"):
        return names
    return names[: torch.cuda.device_count()]


class GpuClaimTimeout(TimeoutError):
    """No free GPUs within a lock's timeout; the message names who holds them."""


def default_lock_dir() -> Path:
    """Where this host's GPU locks lie: one directory for the processes of one allocation
    (SLURM numbers an allocation's GPUs from 0, so two allocations on one node may both name
    theirs "0"), another for those outside any."""
    job = os.environ.get("SLURM_JOB_ID")
    return GPU_LOCKS / f"slurm-job-{job}" if job else GPU_LOCKS


def lock_path(lock_dir: Path, gpu: str) -> Path:
    """The lock file of ``gpu``, an index or a UUID (old-style MIG names hold slashes)."""
    return lock_dir / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', gpu)}.lock"


def _valid(holder) -> bool:
    return (
        isinstance(holder, dict)
        and {"pid", "host", "since"} <= holder.keys()
        and isinstance(holder["pid"], int)
        and holder["pid"] > 0
    )


def _holders(handle) -> list[dict]:
    """The records the processes holding a lock file wrote in it (pid, host, since): one for a
    GPU of its own, a list for a shared GPU; [] if there is none."""
    handle.seek(0)
    try:
        found = json.loads(handle.read())
    except ValueError:
        return []
    return [h for h in (found if isinstance(found, list) else [found]) if _valid(h)]


def _ended(holder: dict) -> bool:
    """Whether the process ``holder`` names has ended; known for this host's processes only."""
    if holder["host"] != socket.gethostname():
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, and another user's
        pass
    return False


def _describe(holders: list[dict]) -> str:
    if not holders:
        return "a process that left no record"
    return ", ".join(f"PID {h['pid']} on {h['host']} since {h['since']}" for h in holders)


def _lock(path: Path, log: logging.Logger | None, shared: bool) -> tuple:
    """``path`` opened and locked, or None while another process holds it; and the holders
    still alive that its record names (for a shared lock taken, those it is shared with).

    A shared lock coexists with shared locks only, an exclusive one with none. Holders whose
    processes have all ended, yet whose lock lives on in a process they started (which
    inherited the open file), are stale: a new file at ``path`` replaces it."""
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    for _ in range(2):
        handle = open(path, "a+")  # not "w": that would erase the holders' record
        recorded = _holders(handle)
        alive = [h for h in recorded if not _ended(h)]
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
            return handle, alive if shared else []
        except BlockingIOError:
            handle.close()
        if alive or not recorded:
            return None, alive
        if log:
            log.warning(
                "%s names %s, which has ended, though a process it started still holds"
                " the lock: taking the GPU",
                path,
                _describe(recorded),
            )
        path.unlink(missing_ok=True)
    return None, alive


@contextlib.contextmanager
def _one_locker_at_a_time(lock_dir: Path):
    """So that a holder's record is written before another locker reads it, and a stale lock
    file is replaced by one locker only."""
    with open(lock_dir / "lockers.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def lock_gpus(
    wanted: int,
    log: logging.Logger | None = None,
    lock_dir: Path | None = None,
    gpus: list[str] | None = None,
    poll_s: float = 2.0,
    timeout_s: float = CLAIM_TIMEOUT_S,
    share: int = 1,
) -> list[str]:
    """Make ``wanted`` GPUs (at most as many as are visible) this process's own and its
    children's, through CUDA_VISIBLE_DEVICES; call it before anything starts CUDA.

    Snakemake counts a job's GPUs but does not say which ones it gets, so each GPU has a lock
    file on this host, held until the process ends, in which the holders write their PID,
    host and start time. With ``share`` 1 the GPUs are the job's own (an exclusive lock: a
    timing shares its GPU with nothing); with more, each is shared with at most ``share`` - 1
    other jobs that lock it the same way (a shared lock, which no exclusive one coexists
    with), and the lock fills the GPU that most such jobs share already, so that a run's
    N x ``share`` sharing jobs use N GPUs. While other processes hold the GPUs, it waits;
    after ``timeout_s`` it raises :class:`GpuClaimTimeout` naming them. In a job that a
    cluster executor submitted (:data:`SUBMITTED`) the allocation already is the lock."""
    if os.environ.get(SUBMITTED):
        if log:
            log.info("GPUs: this job's cluster allocation is its lock")
        return []
    gpus = visible_gpus() if gpus is None else gpus
    lock_dir = default_lock_dir() if lock_dir is None else lock_dir
    if wanted <= 0 < len(gpus):
        # Given none of them (`--resources gpu=0`): CUDA must not find the GPUs either.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    # CUDA shows a process one MIG instance, however many it lists (NVIDIA's MIG user guide)
    wanted = min(wanted, 1 if gpus and gpus[0].startswith("MIG-") else len(gpus))
    if wanted <= 0:
        return []
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    waited = False
    while True:
        locked, holders = {}, {}
        with _one_locker_at_a_time(lock_dir):
            for gpu in gpus:
                handle, holders[gpu] = _lock(lock_path(lock_dir, gpu), log, share > 1)
                if handle and len(holders[gpu]) < share:
                    locked[gpu] = handle
                elif handle:
                    handle.close()
                if share == 1 and len(locked) == wanted:
                    break  # GPUs of its own: the first free ones
            # The fullest first (sorted keeps the listed order among equals)
            chosen = sorted(locked, key=lambda gpu: -len(holders[gpu]))[:wanted]
            for gpu in set(locked) - set(chosen):
                locked.pop(gpu).close()
            if len(locked) == wanted:
                return _hold({gpu: locked[gpu] for gpu in chosen}, holders, gpus, share, log)
            # All or none: holding some while waiting for more could deadlock two 2-GPU jobs.
            for handle in locked.values():
                handle.close()
        busy = "; ".join(
            f"GPU {gpu} is held by {_describe(holders[gpu])} ({lock_path(lock_dir, gpu)})"
            for gpu in gpus
            if gpu not in locked
        )
        if time.monotonic() >= deadline:
            raise GpuClaimTimeout(
                f"no {wanted} free GPU(s) of {', '.join(gpus)} after {timeout_s:g} s: {busy}."
                " End that process, or wait until it ends, then rerun."
            )
        if log and not waited:
            log.info("waiting for %d free GPU(s) of %s: %s", wanted, ", ".join(gpus), busy)
        waited = True
        time.sleep(poll_s)


def _hold(
    held: dict, holders: dict, gpus: list[str], share: int, log: logging.Logger | None
) -> list[str]:
    """Keep the locked files ``held`` (GPU: file) open for the rest of the process, each
    naming this process (beside the live ``holders`` of a shared GPU), and make their GPUs the
    visible ones."""
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.now().isoformat(timespec="seconds"),
    }
    for gpu, handle in held.items():
        handle.truncate(0)
        handle.write(json.dumps([*holders[gpu], record] if share > 1 else record))
        handle.flush()
    _held.extend(held.items())
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(held)
    if log:
        log.info(
            "locked GPU %s of %s%s",
            ", ".join(held),
            ", ".join(gpus),
            f", shared by at most {share} jobs" if share > 1 else "",
        )
    return list(held)


def lock_shared_gpu(resources, share: int, log: logging.Logger | None = None) -> list[str]:
    """The lock of a job that trains and times nothing a verdict depends on, from its
    Snakemake ``resources`` (common.smk's ``needs(..., shared=True)``): the `gpu_share` it
    was given, a GPU shared with at most ``share`` - 1 other such jobs; or, where its rule
    asked for a `gpu` instead (jobs submitted to a cluster), that one as its own."""
    if resources.gpu_share:
        return lock_gpus(resources.gpu_share, log, share=share)
    return lock_gpus(resources.gpu, log)
