"""The torchrun entry point, run as subprocesses (it pins its process to a core)."""

import math
import os
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import LENET, fake_fashion_mnist, ok, run, verdict_of
from d2lrepro.core import paths, reference, results
from d2lrepro.multidevice import data_parallel
from d2lrepro.multidevice.parts import allreduce_by_hand, ddp, run_results, worker
from d2lrepro.pipeline.claims import NOT_REPRODUCED, REPRODUCED

BOOK = reference.load()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return fake_fashion_mnist(tmp_path_factory.mktemp("data") / "fashion_mnist.pt")


def on_gpus(history: pd.DataFrame) -> bool:
    return "CPU core" not in history["devices"].iloc[0]


def close(history: pd.DataFrame) -> float:
    """How close two runs that differ only in the order of float sums come, relatively: on CPU
    cores about 1e-6; on GPUs cuDNN's TF32 convolutions (on by default) and non-deterministic
    kernels round at about 1e-3 per step, compounded over the steps of a run."""
    return 1e-2 if on_gpus(history) else 1e-5


def test_two_workers_train_like_one(data, tmp_path, cpu_only):
    """Same global batches (one data order for both): one and two workers reach the same
    parameters (up to the order of summation). CPU processes, both: on a 1-GPU machine one
    worker would take the GPU (TF32 convolutions) and two the cores."""
    for world in (1, 2):
        ok(
            run(
                [
                    *LENET,
                    "--order-seed",
                    0,
                    "--data",
                    data,
                    "--out",
                    tmp_path / f"{world}.csv",
                    "--checkpoint",
                    tmp_path / f"{world}.pt",
                ],
                nproc=world if world > 1 else None,
            )
        )
    one, two = (pd.read_csv(tmp_path / f"{w}.csv") for w in (1, 2))
    assert list(two.columns) == worker.RUN_COLUMNS
    assert set(two["examples"]) == {512} and (two["steady_samples_per_s"] > 0).all()
    assert (
        two["epoch"].tolist() == [1, 2]
        and set(two["world_size"]) == {2}
        and set(one["world_size"]) == {1}
    )
    assert two["devices"].iloc[0].startswith("2 x ") and set(two["devices_used"]) == {2}
    # a rate for each whole batch after the first: 512 examples in batches of 64
    assert [len(str(rates).split()) for rates in two["batch_rates"]] == [7, 7]
    assert (two["samples_per_s"] > 0).all() and two["test_acc"].between(0, 1).all()
    rel = close(two)
    assert two["train_loss"].tolist() == pytest.approx(one["train_loss"].tolist(), rel=rel)
    assert two["train_acc"].tolist() == pytest.approx(one["train_acc"].tolist(), abs=2 / 512)
    params = [torch.load(tmp_path / f"{w}.pt", weights_only=True)["model"] for w in (1, 2)]
    for key in params[0]:
        assert torch.allclose(params[0][key], params[1][key], rtol=0, atol=rel / 10), key


def test_the_steady_rate_leaves_out_the_first_batch_and_a_partial_last_one():
    # 4 batches of 256 then 100, marked at the end of each whole one: the first takes 2 s
    # (warm-up), the second 1 s, the others 0.5 s each (the partial last one is not marked).
    marks = [(2.0, 256), (3.0, 512), (3.5, 768), (4.0, 1024)]
    assert worker.steady_rate(marks) == 768 / 2
    assert worker.batch_rates(marks) == [256.0, 512.0, 512.0]
    assert math.isnan(worker.steady_rate([(2.0, 512)]))  # one batch
    assert worker.batch_rates([(2.0, 512)]) == []


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_gpu_worker_under_torchrun_trains(data, tmp_path):
    """One worker in a process group on a GPU: joined with its device, warmed up, trained."""
    out = tmp_path / "history.csv"
    ok(run([*LENET, "--data", data, "--out", out], nproc=1))
    history = pd.read_csv(out)
    assert on_gpus(history) and len(history) == 2 and (history["seconds"] > 0).all()


def test_one_and_two_workers_shuffle_apart_from_the_same_parameters():
    """As in the book: the same initial parameters (--seed), a data order per device count."""
    args = worker.parse_args(["--data", "d.pt", "--out", "o.csv", "--seed", "1"])
    one, two = (worker._config(args, world)["order_seed"] for world in (1, 2))
    assert one == 1 and two != one
    pinned = worker.parse_args(["--data", "d.pt", "--out", "o.csv", "--order-seed", "7"])
    assert worker._config(pinned, 2)["order_seed"] == 7


def test_resume_gives_the_uninterrupted_result(data, tmp_path):
    common = [
        "--model",
        "resnet18",
        "--batch-size",
        16,
        "--lr",
        0.05,
        "--momentum",
        0.9,
        "--weight-decay",
        1e-4,
        "--train-subset",
        48,
        "--test-subset",
        32,
        "--data",
        data,
        "--topk-every",
        1,
    ]

    def train(name, epochs):
        ok(
            run(
                [
                    *common,
                    "--epochs",
                    epochs,
                    "--checkpoint",
                    tmp_path / f"{name}.pt",
                    "--out",
                    tmp_path / f"{name}.csv",
                    "--topk-out",
                    tmp_path / f"{name}_topk.csv",
                ]
            )
        )
        return pd.read_csv(tmp_path / f"{name}.csv"), pd.read_csv(tmp_path / f"{name}_topk.csv")

    whole, whole_topk = train("whole", 2)
    first, _ = train("parts", 1)
    assert first["epoch"].tolist() == [1]
    resumed, resumed_topk = train("parts", 2)
    metrics = ["epoch", "train_loss", "train_acc", "test_acc"]
    if on_gpus(whole):  # cuDNN is not deterministic unless told to be: close, not equal
        loss = whole["train_loss"].tolist()
        assert resumed["train_loss"].tolist() == pytest.approx(loss, rel=close(whole))
        for name in ("train_acc", "test_acc"):  # within one example of 48 and 32
            assert resumed[name].tolist() == pytest.approx(whole[name].tolist(), abs=1 / 32)
        assert resumed_topk.shape == whole_topk.shape
    else:
        assert resumed[metrics].equals(whole[metrics])
        assert resumed_topk.equals(whole_topk)
    assert len(whole_topk) == 6
    assert list(whole_topk.columns) == results.TOPK_COLUMNS

    changed = run(
        [
            *common,
            "--epochs",
            3,
            "--lr",
            0.1,
            "--checkpoint",
            tmp_path / "parts.pt",
            "--out",
            tmp_path / "other.csv",
        ]
    )
    assert changed.returncode != 0 and "was written by a run with" in changed.stderr


def test_an_unreadable_checkpoint_is_set_aside_and_training_starts_over(data, tmp_path):
    """A checkpoint cut in half (a copy cut short, a machine that crashed before it reached
    the disk) is moved aside with a warning naming it; the rerun trains from the first epoch."""
    common = [*LENET, "--train-subset", 128, "--test-subset", 64, "--data", data]

    def train(name, epochs, checkpoint):
        out = tmp_path / f"{name}.csv"
        result = ok(run([*common, "--epochs", epochs, "--checkpoint", checkpoint, "--out", out]))
        return pd.read_csv(out), result.stderr

    checkpoint = tmp_path / "cut.pt"
    first, _ = train("first", 1, checkpoint)
    raw = checkpoint.read_bytes()
    checkpoint.write_bytes(raw[: len(raw) // 2])
    rerun, stderr = train("rerun", 2, checkpoint)
    assert f"checkpoint {checkpoint} cannot be read" in stderr
    assert f"moved to {checkpoint}.unreadable, the run starts from the beginning" in stderr
    assert "resuming from" not in stderr
    assert (tmp_path / "cut.pt.unreadable").read_bytes() == raw[: len(raw) // 2]
    # the first epoch again, from the same parameters and data order
    assert rerun["epoch"].tolist() == [1, 2]
    assert rerun["train_loss"][0] == pytest.approx(first["train_loss"][0], rel=close(first))
    assert torch.load(checkpoint, weights_only=True)["epoch"] == 2  # good again for a rerun


def test_dead_worker_fails_the_job_in_bounded_time(data, tmp_path):
    start = time.monotonic()
    result = run(
        [
            *LENET,
            "--data",
            data,
            "--out",
            tmp_path / "dead.csv",
            "--fail-at-epoch",
            1,
            "--timeout",
            60,
        ],
        nproc=2,
        timeout=150,
    )
    assert result.returncode != 0
    assert time.monotonic() - start < 60
    assert "fails at epoch 1" in result.stderr
    assert not (tmp_path / "dead.csv").exists()


def test_parse_args_rejects_momentum_for_scratch_lenet():
    with pytest.raises(SystemExit):
        worker.parse_args(
            ["--model", "lenet", "--momentum", "0.9", "--data", "x.pt", "--out", "y.csv"]
        )
    with pytest.raises(SystemExit):
        worker.parse_args(["--out", "y.csv"])  # training needs --data


FAKE_SRUN = """#!{python}
# srun on a machine of its own: each task a process here, as if on its own node, its
# processes marked by FAKE_NODE in their environment. The first task starts alone until the
# rendezvous it serves listens: on a cluster only the job's node can serve it. With
# FAKE_SRUN_LOSE_NODE_AFTER=DIR the last "node" vanishes (SIGKILL to every process it
# started, workers included) once DIR holds a checkpoint.
import glob, os, signal, socket, subprocess, sys, time
args = sys.argv[1:]
tasks = int(next(a for a in args if a.startswith("--ntasks=")).split("=")[1])
command = args[next(i for i, a in enumerate(args) if not a.startswith("--")) :]
host, port = next(a for a in command if a.startswith("--rdzv-endpoint=")).split("=")[1].split(":")
def start(node):
    return subprocess.Popen(command, env={{**os.environ, "FAKE_NODE": str(node)}})
nodes = [start(0)]
while socket.socket().connect_ex((host, int(port))):
    time.sleep(0.05)
nodes += [start(node) for node in range(1, tasks)]
watch = os.environ.get("FAKE_SRUN_LOSE_NODE_AFTER")
while watch and nodes[-1].poll() is None and not glob.glob(os.path.join(watch, "*.pt")):
    time.sleep(0.02)
if watch and nodes[-1].poll() is None:
    mark = f"FAKE_NODE={{tasks - 1}}".encode()
    for environ in glob.glob("/proc/[0-9]*/environ"):
        try:
            if mark in open(environ, "rb").read().split(b"\\0"):
                os.kill(int(environ.split("/")[2]), signal.SIGKILL)
        except OSError:
            pass
sys.exit(max(abs(node.wait()) for node in nodes))
"""


@pytest.fixture
def two_nodes(tmp_path, monkeypatch, cpu_only):
    """A 2-node SLURM allocation on this machine: a stand-in srun, the job's environment. Its
    "nodes" are CPU processes over gloo: on GPUs each would take this machine's cuda:0."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN.format(python=sys.executable))
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.chdir(tmp_path)


def train_on_nodes(data, tmp_path, spec, name="nodes", timeout=60):
    data_parallel.train(
        "lenet.2",
        spec,
        0,
        data=data,
        history=tmp_path / f"{name}.csv",
        topk=tmp_path / f"{name}.topk.csv",
        topk_every=1,
        timeout=timeout,
        log_path=tmp_path / f"{name}.log",
    )
    return pd.read_csv(tmp_path / f"{name}.csv")


def one_node(data, tmp_path, spec):
    ok(run([*data_parallel.run_argv(spec), "--data", data, "--out", tmp_path / "one.csv"], 2))
    return pd.read_csv(tmp_path / "one.csv")


def test_two_nodes_train_like_one_node_with_two_workers(data, tmp_path, two_nodes, caplog):
    """A run over 2 nodes (here two torchrun agents on this host, started by srun, meeting at
    a c10d rendezvous on it) gives the losses of one node with 2 workers."""
    spec = {"model": "lenet", "devices": 2, "nodes": 2, "epochs": 2, "batch_size": 64, "lr": 0.2}
    caplog.set_level("INFO", logger="d2lrepro.multidevice.parts.launcher")
    nodes, one = train_on_nodes(data, tmp_path, spec), one_node(data, tmp_path, spec)
    assert "srun --nodes=2 --ntasks=2" in caplog.text and "--nproc-per-node=1" in caplog.text
    assert set(nodes["world_size"]) == {2} and nodes["devices"].iloc[0] == one["devices"].iloc[0]
    assert nodes["train_loss"].tolist() == pytest.approx(one["train_loss"].tolist(), rel=1e-6)
    assert nodes["test_acc"].tolist() == one["test_acc"].tolist()


def test_a_lost_node_fails_the_job_and_a_rerun_resumes_from_its_checkpoint(
    data, tmp_path, two_nodes, monkeypatch
):
    spec = {"model": "lenet", "devices": 2, "nodes": 2, "epochs": 12, "batch_size": 64, "lr": 0.2}
    checkpoints = tmp_path / paths.CHECKPOINTS
    monkeypatch.setenv("FAKE_SRUN_LOSE_NODE_AFTER", str(checkpoints))
    start = time.monotonic()
    with pytest.raises(subprocess.CalledProcessError):
        train_on_nodes(data, tmp_path, spec, timeout=10)
    assert time.monotonic() - start < 60
    assert len(list(checkpoints.glob("lenet.2-*.pt"))) == 1
    monkeypatch.delenv("FAKE_SRUN_LOSE_NODE_AFTER")
    resumed = train_on_nodes(data, tmp_path, spec, timeout=10)
    assert "resuming from" in (tmp_path / "nodes.log").read_text()
    whole = one_node(data, tmp_path, spec)
    assert resumed["train_loss"].tolist() == pytest.approx(whole["train_loss"].tolist(), rel=1e-6)


def _replicas(rank, world, store, runs_argv, out):
    """One of 2 gloo workers: each run of ``runs_argv`` as the worker trains it, then each
    again with every replica keeping its own gradient (the from-scratch allreduce and DDP's
    skipped); rank 0 saves the histories, unbroken and broken, by run."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    cpu = torch.device("cpu")
    args = {name: worker.parse_args(list(map(str, argv))) for name, argv in runs_argv.items()}
    unbroken = {name: worker.train(a, cpu, rank)[0] for name, a in args.items()}
    allreduce_by_hand.sync_grads = lambda params: None
    ddp.DistributedDataParallel = lambda net, **kwargs: net
    broken = {name: worker.train(a, cpu, rank)[0] for name, a in args.items()}
    if rank == 0:
        torch.save({name: (unbroken[name], broken[name]) for name in args}, out)
    dist.destroy_process_group()


def test_replicas_that_skip_the_allreduce_drift_apart_and_fail_the_claim(data, tmp_path):
    """The unbroken runs keep their replicas identical (mgpu.2gpu.replicas reproduced); runs
    whose replicas each step with their own gradient fail it, whichever code path drifts."""
    tiny = ["--epochs", 1, "--data", data, "--out", tmp_path / "unused.csv"]
    runs_argv = {
        "lenet.2": [*LENET[:2], "--batch-size", 32, "--train-subset", 64, "--test-subset", 8],
        "resnet18.2": ["--model", "resnet18", "--batch-size", 8, "--train-subset", 8],
    }
    runs_argv = {name: [*argv, *tiny, "--test-subset", 8] for name, argv in runs_argv.items()}
    out = tmp_path / "histories.pt"
    mp.spawn(_replicas, args=(2, tmp_path / "store", runs_argv, out), nprocs=2)
    trained = {
        name: [pd.DataFrame(h).assign(seed=0) for h in pair]
        for name, pair in torch.load(out, weights_only=False).items()
    }

    def verdict(broken: str = "") -> str:
        rows = [
            r
            for name, (unbroken, mutated) in trained.items()
            for r in run_results.run_metrics(name, mutated if name == broken else unbroken, BOOK)
        ]
        return verdict_of("mgpu.2gpu.replicas", rows)

    assert {h["replica_gap"].max() for h, _ in trained.values()} == {0.0}
    assert all(h["replica_gap"].min() > 1e-6 for _, h in trained.values())
    assert verdict() == REPRODUCED
    assert verdict("lenet.2") == verdict("resnet18.2") == NOT_REPRODUCED
