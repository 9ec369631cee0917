"""Starting multi-device runs here, under torchrun or over nodes
(d2lrepro.multidevice.parts.launcher)."""

import os
import socket
import subprocess
import sys
import types

import pandas as pd
import pytest

from conftest import LENET, fake_fashion_mnist
from d2lrepro.multidevice.parts import launcher, worker


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return fake_fashion_mnist(tmp_path_factory.mktemp("data") / "fashion_mnist.pt")


def test_one_device_runs_as_a_python_module_and_more_under_torchrun():
    assert launcher.command(worker, 1, ["--epochs", "2"]) == [
        sys.executable,
        "-m",
        "d2lrepro.multidevice.parts.worker",
        "--epochs",
        "2",
    ]
    assert launcher.command(worker, 2, ["--epochs", "2"]) == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "--max-restarts=0",
        "-m",
        "d2lrepro.multidevice.parts.worker",
        "--epochs",
        "2",
    ]


def test_a_one_device_launch_runs_the_module_in_the_job_s_own_process(tmp_path, caplog):
    module = types.ModuleType("a_worker")
    calls = []
    module.main = calls.append
    caplog.set_level("INFO", logger="d2lrepro.multidevice.parts.launcher")
    launcher.launch(module, 1, ["--out", "x.csv"], tmp_path / "job.log")
    assert calls == [["--out", "x.csv"]]
    assert f"as {sys.executable} -m a_worker --out x.csv" in caplog.text


def test_across_nodes_srun_starts_one_agent_per_node_meeting_at_this_host(monkeypatch):
    monkeypatch.setattr(launcher, "free_port", lambda: 29411)
    cmd = launcher.across_nodes(worker, 2, 4, ["--epochs", "1"], "run7")
    assert cmd[:8] == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
    ]
    assert f"--rdzv-endpoint={socket.gethostname()}:29411" in cmd and "--rdzv-id=run7" in cmd
    assert "--nproc-per-node=2" in cmd
    assert cmd[-4:] == ["-m", "d2lrepro.multidevice.parts.worker", "--epochs", "1"]


def test_a_free_port_can_be_bound():
    with socket.socket() as probe:
        probe.bind(("", launcher.free_port()))


def test_each_node_must_hold_its_share_of_the_devices(monkeypatch):
    monkeypatch.setattr(launcher, "unavailable", lambda devices, share: f"asked for {devices}")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    assert launcher.allocated_nodes() == 2
    assert launcher.nodes_unavailable(2, 8) == "asked for 4"
    assert launcher.nodes_unavailable(3, 3).startswith("needs 3 nodes, this job has 2")


def test_two_jobs_at_once_do_not_collide(data, tmp_path):
    """Each torchrun --standalone picks its own free port: two 2-worker jobs run side by side."""
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    jobs = [
        subprocess.Popen(
            launcher.command(
                worker,
                2,
                [
                    *map(str, LENET[:2]),
                    "--epochs",
                    "1",
                    "--batch-size",
                    "64",
                    "--data",
                    str(data),
                    "--out",
                    str(tmp_path / f"{i}.csv"),
                ],
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    for job in jobs:
        _, err = job.communicate(timeout=180)
        assert job.returncode == 0, err[-3000:]
    assert all(len(pd.read_csv(tmp_path / f"{i}.csv")) == 1 for i in range(2))


def test_a_run_across_nodes_needs_an_allocation_of_them(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_NUM_NODES", raising=False)
    assert launcher.nodes_unavailable(2, 2).startswith("needs 2 nodes, this job has 1")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    assert launcher.nodes_unavailable(2, 2) == ""
    argv = launcher.torchrun_argv(worker, 4, [], nodes=2, endpoint="node1:29400", run_id="r")
    assert {"--nnodes=2", "--nproc-per-node=2", "--rdzv-endpoint=node1:29400"} <= set(argv)
    assert "--standalone" not in argv and "--standalone" in launcher.torchrun_argv(worker, 2, [])
