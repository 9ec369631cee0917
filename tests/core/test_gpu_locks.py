"""Claiming GPUs for a job through lock files (d2lrepro.core.gpu_locks)."""

import fcntl
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from d2lrepro.core import gpu_locks


def lock_in_child(lock_dir, gpus, hold_s=0.0, share=1):
    """A process that locks one of ``gpus`` (shared by at most ``share`` jobs) and prints
    what CUDA_VISIBLE_DEVICES became."""
    code = (
        "import os, sys, time; from pathlib import Path; from d2lrepro.core import gpu_locks; "
        f"gpu_locks.lock_gpus(1, lock_dir=Path({str(lock_dir)!r}), gpus={gpus!r}, poll_s=0.1,"
        f" share={share}); "
        "print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); "
        f"time.sleep({hold_s})"
    )
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )


def test_jobs_on_one_machine_never_share_a_gpu(tmp_path):
    """Two 1-GPU jobs on a 2-GPU machine get one GPU each (not both cuda:0); a third waits
    until one of them ends, then gets its GPU."""
    first, second = (lock_in_child(tmp_path, ["0", "1"], hold_s=3) for _ in range(2))
    taken = {first.stdout.readline().strip(), second.stdout.readline().strip()}
    assert taken == {"0", "1"}
    third = lock_in_child(tmp_path, ["0", "1"])
    start = time.monotonic()
    assert third.stdout.readline().strip() in taken
    assert time.monotonic() - start > 1  # it waited for a GPU to come free
    for p in (first, second, third):
        assert p.wait(timeout=30) == 0


def test_a_lock_takes_all_its_gpus_or_none(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    holder = lock_in_child(tmp_path, ["GPU-a", "GPU-b"], hold_s=60)
    try:
        assert holder.stdout.readline().strip() == "GPU-a"
        assert gpu_locks.lock_gpus(1, lock_dir=tmp_path, gpus=["GPU-a", "GPU-b"]) == ["GPU-b"]
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-b"
        # asking for more than there are takes what there is; none asked, none taken
        assert gpu_locks.lock_gpus(0, lock_dir=tmp_path, gpus=["GPU-a"]) == []
    finally:
        holder.kill()
        holder.wait()
        for _, handle in gpu_locks._held:
            handle.close()
        gpu_locks._held.clear()


def test_a_job_a_cluster_executor_submitted_locks_nothing(tmp_path, monkeypatch):
    """Its allocation is its lock: no lock, and the GPUs SLURM gave it stay visible."""
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv(gpu_locks.SUBMITTED, "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert gpu_locks.lock_gpus(1, lock_dir=tmp_path, gpus=["0", "1"]) == []
    assert not list(tmp_path.iterdir())
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_a_run_started_by_hand_inside_an_allocation_locks_its_gpus(tmp_path, monkeypatch):
    """``snakemake --cores all`` inside salloc: each job locks among the allocation's GPUs,
    under a lock directory of the allocation's own (another allocation on the node numbers
    its GPUs from 0 too), and a job given none hides them."""
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.delenv(gpu_locks.SUBMITTED, raising=False)
    monkeypatch.setattr(gpu_locks, "GPU_LOCKS", tmp_path)
    try:
        assert gpu_locks.lock_gpus(1, gpus=["0", "1"]) == ["0"]
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
        assert gpu_locks.lock_path(tmp_path / "slurm-job-7", "0").exists()
        assert gpu_locks.lock_gpus(0, gpus=["0", "1"]) == []
        assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    finally:
        for _, handle in gpu_locks._held:
            handle.close()
        gpu_locks._held.clear()


PARSE_IN_MODE = """
import os
import sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import (
    ConfigSettings, ExecMode, OutputSettings, ResourceSettings, WorkflowSettings
)

with SnakemakeApi(OutputSettings()) as api:
    api.workflow(
        snakefile=Path("Snakefile"),
        resource_settings=ResourceSettings(cores=2),
        config_settings=ConfigSettings(config={}),  # auto: keeps a results tree's preset
        workflow_settings=WorkflowSettings(exec_mode=ExecMode[sys.argv[1]]),
    )._workflow
print("SUBMITTED", os.environ.get(sys.argv[2], "") or "no")
"""


def test_the_workflow_marks_the_jobs_a_cluster_executor_submitted(repo):
    """Parsed in Snakemake's remote mode (how the jobs the SLURM executor submitted run), the
    workflow tells their scripts that the allocation is their lock; parsed for a run started
    by hand, it does not."""
    env = {k: v for k, v in os.environ.items() if k != gpu_locks.SUBMITTED}
    said = {}
    for mode in ("DEFAULT", "REMOTE"):
        done = subprocess.run(
            [sys.executable, "-c", PARSE_IN_MODE, mode, gpu_locks.SUBMITTED],
            cwd=repo,
            capture_output=True,
            text=True,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        said[mode] = re.findall(r"^SUBMITTED (\S+)$", done.stdout, re.M)
    assert said == {"DEFAULT": ["no"], "REMOTE": ["1"]}


def test_a_job_given_no_gpu_hides_the_machine_s(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpu_locks.lock_gpus(0, lock_dir=tmp_path, gpus=[]) == []
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # nothing to hide
    assert gpu_locks.lock_gpus(0, lock_dir=tmp_path, gpus=["0", "1"]) == []
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""


@pytest.fixture
def own_locks(monkeypatch):
    """Claims made by the test's own process, given back after it."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    yield
    for _, handle in gpu_locks._held:
        handle.close()
    gpu_locks._held.clear()


def test_a_gpu_held_by_another_process_times_out_naming_it(tmp_path, own_locks):
    holder = lock_in_child(tmp_path, ["0"], hold_s=60)
    try:
        assert holder.stdout.readline().strip() == "0"
        record = json.loads((tmp_path / "gpu-0.lock").read_text())
        assert record["pid"] == holder.pid and record["host"] == socket.gethostname()
        start = time.monotonic()
        with pytest.raises(gpu_locks.GpuClaimTimeout) as error:
            gpu_locks.lock_gpus(1, lock_dir=tmp_path, gpus=["0"], poll_s=0.05, timeout_s=0.5)
        assert 0.5 <= time.monotonic() - start < 10
        message = str(error.value)
        assert f"GPU 0 is held by PID {holder.pid} on {socket.gethostname()} since " in message
        assert str(tmp_path / "gpu-0.lock") in message
    finally:
        holder.kill()
        holder.wait()


HOLD_THEN_DIE = """
import os, sys, time
from pathlib import Path
from d2lrepro.core import gpu_locks
gpu_locks.lock_gpus(1, lock_dir=Path(sys.argv[1]), gpus=["0"])
child = os.fork()  # inherits the locked file, and outlives this process
if child == 0:
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
"""


def test_a_lock_whose_holder_has_ended_is_taken(tmp_path, own_locks, caplog):
    """The locking process ended (killed, say), but a process it forked still holds the lock
    file: the lock is stale, and the next lock takes the GPU without waiting."""
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    dead = subprocess.Popen(
        [sys.executable, "-c", HOLD_THEN_DIE, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    orphan = int(dead.stdout.readline())
    try:
        assert dead.wait(timeout=30) == 0
        with open(tmp_path / "gpu-0.lock") as f:  # still held, by the orphan
            with pytest.raises(BlockingIOError):
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        log = logging.getLogger("test.lock")
        with caplog.at_level(logging.INFO, logger="test.claim"):
            assert gpu_locks.lock_gpus(1, log, tmp_path, gpus=["0"], timeout_s=5) == ["0"]
        assert f"names PID {dead.pid} on {socket.gethostname()}" in caplog.text
        assert json.loads((tmp_path / "gpu-0.lock").read_text())["pid"] == os.getpid()
    finally:
        os.kill(orphan, signal.SIGKILL)


def test_cuda_visible_devices_as_cuda_reads_it():
    assert gpu_locks.parse_visible_devices("0,1") == ["0", "1"]
    assert gpu_locks.parse_visible_devices(" 2 , 0 ") == ["2", "0"]
    assert gpu_locks.parse_visible_devices("0,-1,1") == ["0"]  # CUDA stops at an invalid entry
    assert gpu_locks.parse_visible_devices("") == []
    uuids = "GPU-8f6c1b2e-1d2a-4c3b-9e0f-0a1b2c3d4e5f,GPU-0a1b2c3d"
    assert gpu_locks.parse_visible_devices(uuids) == uuids.split(",")
    mig = "MIG-4b3c2d1e-aaaa-bbbb-cccc-111122223333,MIG-GPU-8f6c1b2e/1/0"
    assert gpu_locks.parse_visible_devices(mig) == mig.split(",")


def test_visible_gpus_by_uuid_and_mig_without_starting_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb")
    assert gpu_locks.visible_gpus() == ["GPU-aaaa"]  # what NVML finds of the list

    def starts_cuda():
        raise AssertionError("torch counts MIG instances by starting CUDA")

    monkeypatch.setattr(torch.cuda, "device_count", starts_cuda)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-aaaa, MIG-bbbb")
    assert gpu_locks.visible_gpus() == ["MIG-aaaa", "MIG-bbbb"]


def test_a_lock_takes_one_mig_instance(tmp_path, own_locks):
    """CUDA shows a process one MIG instance, so a 2-GPU job gets one (its 2-GPU parts are
    then not applicable); old-style MIG names, with slashes, still name one lock file."""
    migs = ["MIG-GPU-8f6c1b2e/1/0", "MIG-GPU-8f6c1b2e/2/0"]
    assert gpu_locks.lock_gpus(2, lock_dir=tmp_path, gpus=migs) == migs[:1]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == migs[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "gpu-MIG-GPU-8f6c1b2e_1_0.lock",
        "lockers.lock",
    ]


def test_jobs_that_only_train_share_a_gpu_and_a_timing_job_waits_for_them(tmp_path, own_locks):
    """Shared locks coexist; an exclusive lock (a job that times) waits until every sharing
    job has ended, then gets the GPU."""
    start = time.monotonic()
    sharing = [lock_in_child(tmp_path, ["0"], hold_s=60, share=4) for _ in range(2)]
    try:
        assert [p.stdout.readline().strip() for p in sharing] == ["0", "0"]
        assert time.monotonic() - start < 30  # neither waited for the other to end
        record = json.loads((tmp_path / "gpu-0.lock").read_text())
        assert sorted(h["pid"] for h in record) == sorted(p.pid for p in sharing)
        with pytest.raises(gpu_locks.GpuClaimTimeout) as error:
            gpu_locks.lock_gpus(1, lock_dir=tmp_path, gpus=["0"], poll_s=0.05, timeout_s=0.5)
        assert all(f"PID {p.pid} on {socket.gethostname()}" in str(error.value) for p in sharing)
    finally:
        for p in sharing:
            p.kill()
            p.wait()
    assert gpu_locks.lock_gpus(1, lock_dir=tmp_path, gpus=["0"], timeout_s=5) == ["0"]
    assert json.loads((tmp_path / "gpu-0.lock").read_text())["pid"] == os.getpid()


def test_a_gpu_that_a_timing_job_holds_is_shared_with_nothing(tmp_path, own_locks):
    timing = lock_in_child(tmp_path, ["0"], hold_s=60)
    try:
        assert timing.stdout.readline().strip() == "0"
        with pytest.raises(gpu_locks.GpuClaimTimeout, match=f"GPU 0 is held by PID {timing.pid} "):
            gpu_locks.lock_gpus(
                1, lock_dir=tmp_path, gpus=["0"], poll_s=0.05, timeout_s=0.5, share=4
            )
    finally:
        timing.kill()
        timing.wait()
    assert gpu_locks.lock_gpus(1, lock_dir=tmp_path, gpus=["0"], timeout_s=5, share=4) == ["0"]
    assert [h["pid"] for h in json.loads((tmp_path / "gpu-0.lock").read_text())] == [os.getpid()]


def test_sharing_jobs_fill_one_gpu_before_the_next(tmp_path, own_locks):
    """At most ``share`` jobs on a GPU, the fullest taken first: a run given N GPUs runs its
    N x share sharing jobs on N of them (`--resources gpu=1` on 2 GPUs uses one)."""
    first = lock_in_child(tmp_path, ["0", "1"], hold_s=60, share=2)
    try:
        assert first.stdout.readline().strip() == "0"
        # GPU 1 is free, yet GPU 0 has room: the claim joins the job there
        assert gpu_locks.lock_gpus(1, lock_dir=tmp_path, gpus=["1", "0"], share=2) == ["0"]
        # GPU 0 is full
        assert gpu_locks.lock_gpus(1, lock_dir=tmp_path, gpus=["0", "1"], share=2) == ["1"]
        with pytest.raises(gpu_locks.GpuClaimTimeout):
            gpu_locks.lock_gpus(1, lock_dir=tmp_path, gpus=["0"], timeout_s=0.3, share=2)
    finally:
        first.kill()
        first.wait()
    # its holder has ended: the place is free again
    assert gpu_locks.lock_gpus(1, lock_dir=tmp_path, gpus=["0"], timeout_s=5, share=2) == ["0"]


def test_a_sharing_job_that_ended_does_not_keep_its_gpu(tmp_path, own_locks):
    """The record still names a sharing job that has ended: it is not counted, while the
    jobs that still run are."""
    ended = lock_in_child(tmp_path, ["0"], share=2)
    assert ended.stdout.readline().strip() == "0"
    assert ended.wait(timeout=30) == 0
    alive = lock_in_child(tmp_path, ["0"], hold_s=60, share=2)
    try:
        assert alive.stdout.readline().strip() == "0"
        assert gpu_locks.lock_gpus(1, lock_dir=tmp_path, gpus=["0"], timeout_s=5, share=2) == ["0"]
        pids = [h["pid"] for h in json.loads((tmp_path / "gpu-0.lock").read_text())]
        assert pids == [alive.pid, os.getpid()]
    finally:
        alive.kill()
        alive.wait()


@pytest.mark.parametrize(
    "gpu, gpu_share, claim",
    [(0, 1, (1, 4)), (1, 0, (1, 1))],  # planned here: shared; planned for a cluster: its own
)
def test_a_job_that_only_trains_claims_what_its_rule_asked_for(gpu, gpu_share, claim, monkeypatch):
    from types import SimpleNamespace

    calls = []
    monkeypatch.setattr(
        gpu_locks, "lock_gpus", lambda wanted, log=None, share=1: calls.append((wanted, share))
    )
    gpu_locks.lock_shared_gpu(SimpleNamespace(gpu=gpu, gpu_share=gpu_share), 4)
    assert calls == [claim]


def test_a_job_that_only_trains_given_no_gpu_hides_them(tmp_path, monkeypatch, own_locks):
    from types import SimpleNamespace

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(gpu_locks, "visible_gpus", lambda: ["0"])
    assert gpu_locks.lock_shared_gpu(SimpleNamespace(gpu=0, gpu_share=0), 4) == []
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""


class FakeNvml:
    """libnvidia-ml as torch and nvml_gpu_count call it: ``found`` GPUs, each call answering
    its return code (0: success), and the calls made."""

    def __init__(self, found, init_rc=0, count_rc=0):
        self.found, self.init_rc, self.count_rc, self.calls = found, init_rc, count_rc, []

    def nvmlInit(self):
        self.calls.append("init")
        return self.init_rc

    def nvmlDeviceGetCount_v2(self, count):
        self.calls.append("count")
        if not self.count_rc:
            count._obj.value = self.found
        return self.count_rc

    def nvmlShutdown(self):
        self.calls.append("shutdown")
        return 0


@pytest.fixture
def nvml(monkeypatch):
    """Make ``ctypes.CDLL("libnvidia-ml.so.1")`` load ``library`` (a :class:`FakeNvml`):
    ``nvml(library)``."""
    import ctypes

    def fake(library):
        monkeypatch.setattr(ctypes, "CDLL", lambda name: library)
        return library

    return fake


VISIBLE = [None, "", " ", "0", "1", "3", "0,1", "1,0", " 1 , 0 ", "0,2,1", "2,0", "0,0", "1,0,1"]


@pytest.mark.parametrize("found", [0, 1, 2, 4, 70])
@pytest.mark.parametrize("visible", VISIBLE)
def test_the_gpu_count_without_torch_is_torch_s(visible, found, nvml, monkeypatch):
    """The count made without importing torch equals the one torch makes before CUDA starts,
    through the same (fake) NVML, for each CUDA_VISIBLE_DEVICES value."""
    nvml(FakeNvml(found))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpu_locks.nvml_gpu_count(visible) == torch.cuda._device_count_nvml()


@pytest.mark.parametrize(
    "visible",
    ["GPU-8f6c1b2e,GPU-0a1b2c3d", "MIG-4b3c2d1e", "0,-1", "1gpu2", "+1", "0,", "0,GPU-aa", "²"],
)
def test_uuids_and_odd_entries_are_left_to_torch(visible, nvml):
    nvml(FakeNvml(2))
    assert gpu_locks.nvml_gpu_count(visible) is None


def test_where_nvml_cannot_tell_torch_counts(nvml, monkeypatch):
    library = nvml(FakeNvml(2, init_rc=9))  # NVML_ERROR_DRIVER_NOT_LOADED
    assert gpu_locks.nvml_gpu_count(None) is None
    assert library.calls == ["init"]  # nothing to shut down
    library = nvml(FakeNvml(2, count_rc=999))  # NVML_ERROR_UNKNOWN
    assert gpu_locks.nvml_gpu_count("0") is None
    assert library.calls == ["init", "count", "shutdown"]
    nvml(FakeNvml(-1))  # a count NVML cannot mean: torch asks CUDA
    assert gpu_locks.nvml_gpu_count(None) is None
    nvml(SimpleNamespace(nvmlInit=lambda: 0, nvmlShutdown=lambda: 0))  # an older library
    assert gpu_locks.nvml_gpu_count(None) is None

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr("ctypes.CDLL", missing)
    assert gpu_locks.nvml_gpu_count("0") is None
    assert gpu_locks.nvml_gpu_count("") == 0  # nothing visible: no need to ask


@pytest.mark.cuda
@pytest.mark.parametrize("visible", [None, "", "0", "0,0", "1", "0,1", "1,0", "64"])
def test_the_gpu_count_without_torch_is_torch_s_on_this_machine(visible, monkeypatch):
    """Against this machine's NVML, where it has one (a GPU machine)."""
    if gpu_locks._nvml_device_count() is None:
        pytest.skip("no NVML on this machine")
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpu_locks.nvml_gpu_count(visible) == torch.cuda._device_count_nvml()
