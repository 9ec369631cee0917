"""Every CUDA path of the package at tiny sizes: streams, copy overlap, bandwidth, transfers,
launches, the pinned memory a queue's copies hold, hybridization, the GPU locks, DDP over NCCL
on 1 and 2 GPUs, the parameter-server strategies, and the book's one-process code (scatter,
DataParallel).

On this machine's CUDA where it has one, else under the fake CUDA of fake_cuda.py (2 GPUs
whose tensors live on the CPU), but for the tests that start processes on the GPU (torchrun
workers, jobs that lock GPUs), which need CUDA; `pytest -m cuda` runs only these. Numbers are
not judged here (the workflow does that): each path must run and measure.
"""

import math
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import LENET, fake_fashion_mnist, ok, run
from conftest import prepared_data as book_data
from d2lrepro.core import devices
from d2lrepro.multidevice import cost_model, parameter_server, single_process
from d2lrepro.performance import asynchrony, autopar, hardware, hybridize
from fake_cuda import GPUS, REAL, install_for_good, kept_devices, sized

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("cuda")]
two_gpus = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 CUDA devices, this machine has {GPUS}")
processes = pytest.mark.skipif(
    not REAL,
    reason="needs CUDA, this machine has none: the GPU processes it starts cannot take the "
    "fake CUDA of this process",
)
# Every timer takes a time limit; those of torch.utils.benchmark also a least time.
LIMIT = {"max_run_time": sized(0.2, 0.02)}
FAST = {**LIMIT, "min_run_time": 0.01}
CUDA0 = torch.device("cuda", 0)


def measured(rows: list[dict], prefix: str) -> dict[str, float]:
    """The values of the rows named ``prefix``..., each of which must be a measured number."""
    picked = {row["metric"]: row for row in rows if row["metric"].startswith(prefix)}
    assert picked, prefix
    for name, row in picked.items():
        assert not row["status"] and math.isfinite(row["value"]), (name, row)
    return {name: row["value"] for name, row in picked.items()}


@pytest.fixture(scope="module")
def fashion(tmp_path_factory):
    return fake_fashion_mnist(tmp_path_factory.mktemp("data") / "fashion_mnist.pt")


def test_the_gpu_queue_and_the_copies_it_holds():
    rows = asynchrony.asynchrony(size=64, steps=2, repeats=1)
    assert measured(rows, "async.cuda.")["async.cuda.sync_s"] > 0
    assert measured(rows, "async.z") == {"async.z0": 3.0, "async.z1": 3.0}
    assert {row["device"] for row in rows if row["metric"].startswith("async.z")} == {"cuda:0"}
    held = measured(asynchrony.queue_memory(size=256, steps=3), "async.memory.")
    assert held["async.memory.sync_copies_in_flight"] == 1
    assert held["async.memory.nosync_copies_in_flight"] in (1, 2, 3)


def test_two_streams_and_overlapped_copies():
    measured(autopar.autopar_streams(size=64, n=2, **LIMIT), "autopar.streams.")
    measured(autopar.copy_overlap(size=64, n=2, **LIMIT), "copy.")


@two_gpus
def test_two_gpus_in_parallel():
    measured(autopar.autopar_gpus(size=64, n=2, **LIMIT), "autopar.gpus.")


def test_copies_and_launches():
    rates = measured(hardware.bandwidth(sizes_mib=(1,), **FAST), "bandwidth.")
    assert len(rates) == 4 and all(rate > 0 for rate in rates.values())
    assert measured(hardware.bandwidth(sizes_mib=(1,), **FAST), "latency.")
    measured(hardware.transfer_cost(CUDA0, total_mib=1, chunk_kib=64, **LIMIT), "")
    assert min(hardware.launch_seconds(CUDA0, launches=10)) > 0
    sweep = hardware.memory_sweep(max_bytes=1 << 20, on_devices=["cuda:0"], **FAST)
    assert set(sweep["device"]) == {"cuda:0"} and (sweep.filter(like="gbps") > 0).all().all()


def test_hybridization_on_the_gpu():
    rows = hybridize.hybridize(
        batch_sizes=(1,),
        modes=("eager", "script"),
        n_calls=2,
        device="cuda:0",
        prefix="hyb.cuda",
        cold_batch=None,  # as the workflow times a GPU: the cold loops run on the CPU only
        **FAST,
    )
    measured(rows, "hyb.cuda.batch1.eager.")
    assert measured(rows, "hyb.cuda.batch1.script.")["hyb.cuda.batch1.script.max_abs_diff"] <= 1e-4


@processes
def test_a_locked_gpu_is_all_that_torch_sees(tmp_path):
    code = (
        "from pathlib import Path; import torch; from d2lrepro.core import gpu_locks; "
        f"gpu_locks.lock_gpus(1, lock_dir=Path({str(tmp_path)!r})); "
        "print(torch.cuda.device_count(), torch.cuda.get_device_name(0))"
    )
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert out.split()[0] == "1"


SHARED_TRAINING = """
import sys
from pathlib import Path
import torch
from d2lrepro.core import data, gpu_locks, models, training

gpu_locks.lock_gpus(1, lock_dir=Path(sys.argv[1]), share=2)
fashion = data.load_data(sys.argv[2], device="cuda:0")
print(torch.cuda.device_count(), flush=True)  # its CUDA context is up
sys.stdin.readline()  # both processes hold the GPU: train beside each other
history = training.train(models.lenet(seed=0), fashion, 2, [0.3, 0.3], device="cuda:0")
print(history["test_acc"].iloc[-1], flush=True)
"""


@processes
def test_two_jobs_that_only_train_share_one_gpu(fashion, tmp_path):
    """Two lr-schedule jobs lock one GPU (jobs_per_gpu 2), both start CUDA on it and train
    beside each other: a GPU whose compute mode lets one process only would fail here."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES")}
    env["CUDA_VISIBLE_DEVICES"] = "0"
    jobs = [
        subprocess.Popen(
            [sys.executable, "-c", SHARED_TRAINING, str(tmp_path), str(fashion)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    try:
        assert [job.stdout.readline().strip() for job in jobs] == ["1", "1"]
        for job in jobs:
            job.stdin.write("go\n")
            job.stdin.flush()
        for job in jobs:
            assert 0 <= float(job.stdout.readline()) <= 1
            assert job.wait(timeout=120) == 0
    finally:
        for job in jobs:
            job.kill()
            job.wait()


RESNET = ["--model", "resnet18", "--epochs", 1, "--batch-size", 16, "--lr", 0.05]
RESNET += ["--train-subset", 64, "--test-subset", 32]


@processes
@pytest.mark.parametrize("model", [LENET, RESNET], ids=["lenet", "resnet18"])
@pytest.mark.parametrize("world", [1, pytest.param(2, marks=two_gpus)])
def test_training_on_gpus(model, world, fashion, tmp_path):
    """LeNet from scratch (own allreduce) and ResNet-18 (DDP), over NCCL with 2 GPUs."""
    out = tmp_path / "history.csv"
    argv = [*model, "--data", fashion, "--out", out, "--checkpoint", tmp_path / "run.pt"]
    ok(run(argv, nproc=world if world > 1 else None))
    history = pd.read_csv(out)
    assert set(history["world_size"]) == {world}
    assert history["devices"].iloc[0].startswith(f"{world} x ")
    assert "CPU core" not in history["devices"].iloc[0]


@processes
@pytest.mark.parametrize("model", [LENET, RESNET], ids=["lenet", "resnet18"])
def test_two_workers_that_may_share_one_gpu_train_on_it(model, fashion, tmp_path, monkeypatch):
    """A run about the algorithm on one GPU (its launcher sets SHARE_GPUS): both workers on
    it, over gloo (NCCL refuses two ranks on one GPU), their replicas identical, and the
    history says that they shared it."""
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", first)
    monkeypatch.setenv(devices.SHARE_GPUS, "1")
    out = tmp_path / "history.csv"
    argv = [*model, "--data", fashion, "--out", out, "--checkpoint", tmp_path / "run.pt"]
    ok(run(argv, nproc=2))
    history = pd.read_csv(out)
    assert history["devices"].iloc[0].startswith("2 workers sharing 1 GPU (")
    assert set(history["devices_used"]) == {1} and set(history["world_size"]) == {2}
    # identical to the 9 decimals mgpu.2gpu.replicas checks
    assert (history["replica_gap"].round(9) == 0).all()
    assert history["test_acc"].between(0, 1).all()


@processes
@two_gpus
def test_cost_model_and_parameter_servers_on_gpus(tmp_path):
    costs = {"lenet": {"batches": [2], "repeats": 1}}
    outputs = {"lenet": tmp_path / "cost_lenet.csv"}
    cost_model.launch(costs, outputs, tmp_path / "examples.csv", 0, 120, tmp_path / "cost.log")
    assert (pd.read_csv(outputs["lenet"])["t1"] > 0).all()
    servers = tmp_path / "ps.csv"
    spec = {"mb": 1, "repeats": 2, "max_devices": 8}
    parameter_server.launch(spec, servers, 120, tmp_path / "ps.log")
    ps = pd.read_csv(servers).set_index("metric")
    two = ps[~ps.index.str.startswith("ps.all.")]
    assert all_measured(two), two[two["status"].notna()]
    assert ps.loc["ps.host.median_s", "value"] > 0  # through host memory: CUDA only
    # on all the GPUs where there are more than 2
    on_all = ps[ps.index.str.startswith("ps.all.")]
    if torch.cuda.device_count() > 2:
        assert all_measured(on_all) and ps.loc["ps.all.workers", "value"] > 2
    else:
        assert (on_all["status"] == "not applicable").all()


def all_measured(rows: pd.DataFrame) -> bool:
    """Whether every row of a parameter-server run holds a number, but for the NVLink
    bandwidth where NVML finds no NVLink between the GPUs (GPUs joined by PCIe alone)."""
    nvlink = rows.index.str.contains(".ring_nvlink.", regex=False)
    unlinked = nvlink & rows["note"].fillna("").str.startswith("no NVLink between")
    return bool((rows["status"].isna() | unlinked).all())


def small_book_data():
    """The book's code's data: 96 training and 32 test images; 8 and 8 under the fake CUDA,
    whose CPU takes a second for ResNet-18 on a few images."""
    return book_data().subset(sized(None, 8), sized(None, 8))


def _servers(rank, store, out):
    """One of 2 workers timing every parameter-server strategy on its own GPU (without CUDA,
    on the worker's own fake, whose NCCL is gloo)."""
    install_for_good()
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl", init_method=f"file://{store}", rank=rank, world_size=2, device_id=device
    )
    rows = parameter_server.measure(1, 2, device)
    if rank == 0:
        torch.save(rows, out)
    dist.destroy_process_group()


@two_gpus
def test_every_parameter_server_strategy_on_two_gpus(tmp_path):
    """The strategies on GPUs, the copy through host memory among them (CUDA only)."""
    mp.spawn(_servers, args=(tmp_path / "store", tmp_path / "rows"), nprocs=2)
    rows = pd.DataFrame(torch.load(tmp_path / "rows", weights_only=False)).set_index("metric")
    assert set(rows.index) == {r["metric"] for r in parameter_server.unmeasured_rows("x")}
    timed = rows[~rows.index.str.startswith("ps.ring_nvlink.")]  # NVML's finding
    assert (timed["status"] == "").all(), timed[timed["status"] != ""]
    assert rows.loc["ps.host.median_s", "value"] > 0 and rows.loc["ps.workers", "value"] == 2


def test_the_books_code_on_one_gpu():
    data = small_book_data()
    for train in (single_process.train_scratch, single_process.train_concise):
        history = train(data, [CUDA0], 1, 32, 0.1)
        assert history["train_loss"].notna().all() and history["test_acc"].between(0, 1).all()


@two_gpus
def test_the_books_code_on_two_gpus():
    gpus = [CUDA0, torch.device("cuda", 1)]
    rows = torch.arange(20.0).reshape(4, 5)
    with kept_devices():  # under the fake, torch's FakeTensorMode: devices, no values
        assert [s.device for s in single_process.scatter(rows, gpus)] == gpus
    shards = single_process.scatter(rows, gpus)
    assert [s[:, 0].tolist() for s in shards] == [[0, 5], [10, 15]]
    data = small_book_data()
    one = single_process.train_scratch(data, gpus[:1], 2, 32, 0.2)
    two = single_process.train_scratch(data, gpus, 2, 32, 0.2)
    assert two["train_loss"].tolist() == pytest.approx(one["train_loss"].tolist(), rel=1e-2)
    concise = single_process.train_concise(data, gpus, 1, 32, 0.1)  # nn.DataParallel
    assert concise["train_loss"].notna().all()


def test_the_books_scatter_gives_each_gpu_its_rows():
    """mgpu.scatter on two GPUs reads the book's nn.parallel.scatter, each shard named by the
    GPU it was sent to."""
    from conftest import verdict_of
    from d2lrepro.multidevice.parts import allreduce_by_hand
    from d2lrepro.pipeline.claims import REPRODUCED

    rows = allreduce_by_hand.book_scatter_rows(4, 5, 2)
    assert [r["value"] for r in rows] == [0, 1, 2, 3]
    # Each row names where its shard landed: the fake CUDA keeps its tensors on the CPU.
    landed = ["cuda:0", "cuda:0", "cuda:1", "cuda:1"] if REAL else ["cpu"] * 4
    assert [r["device"] for r in rows] == landed
    assert not any(r["note"] for r in rows)
    assert verdict_of("mgpu.scatter", rows) == REPRODUCED
