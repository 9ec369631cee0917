import ast
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from d2lrepro.core import devices, paths
from d2lrepro.pipeline import settings

WHO = "the job that measured it could use"
TWO_ON_ONE_GPU = f"needs 2 devices, {WHO} 1 (1 GPU)"


def test_a_cpu_only_machine_runs_as_many_workers_as_it_has_cores(cuda_count, monkeypatch):
    cuda_count(0)
    monkeypatch.setattr(devices, "usable_cores", lambda: 2)
    assert devices.unavailable(1) == devices.unavailable(2) == ""
    assert devices.unavailable(3) == f"needs 3 devices, {WHO} 2 (2 CPU cores)"
    # a GPU's work cannot go to a core
    assert devices.unavailable(cuda=1) == f"needs CUDA, {WHO} none"
    assert devices.unavailable(cuda=2) == f"needs 2 GPUs, {WHO} none"
    assert devices.device_for(1, 2) == torch.device("cpu")


def test_fewer_gpus_than_workers_makes_every_worker_a_cpu_process(cuda_count):
    cuda_count(1)
    assert devices.worker_kind(1) == "cuda" and devices.device_for(0, 1) == torch.device("cuda", 0)
    assert devices.worker_kind(2) == "cpu"
    assert devices.device_for(0, 2) == devices.device_for(1, 2) == torch.device("cpu")
    # the workflow compares like with like: 2 devices on a 1-GPU machine do not run, and 2
    # CUDA devices lack the same: one phrasing for one shortfall
    assert devices.unavailable(2) == devices.unavailable(cuda=2) == TWO_ON_ONE_GPU


def test_workers_allowed_to_share_share_the_one_gpu_over_gloo(cuda_count, monkeypatch):
    """A run about the algorithm (its launcher sets SHARE_GPUS) on one GPU: both workers on
    it, over gloo (NCCL refuses two ranks on one GPU), said so; with a GPU each, NCCL; without
    the launcher's leave, workers that outnumber the GPUs fall back to pinned cores."""
    from d2lrepro.multidevice.parts import process_group

    cuda_count(1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert devices.unavailable(2, share=True) == "" and devices.unavailable(2) == TWO_ON_ONE_GPU
    assert devices.unavailable(2, cuda=2, share=True) == TWO_ON_ONE_GPU  # GPUs of its own
    assert devices.device_for(1, 2) == torch.device("cpu")
    monkeypatch.setenv(devices.SHARE_GPUS, "1")
    shared = [devices.device_for(r, 2) for r in (0, 1)]
    assert shared == [torch.device("cuda", 0)] * 2
    assert process_group.backend(shared[0]) == "gloo"
    assert devices.devices_used(shared) == 1
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H200")
    assert devices.describe(shared) == "2 workers sharing 1 GPU (NVIDIA H200)"
    cuda_count(2)
    own = [devices.device_for(r, 2) for r in (0, 1)]
    assert own == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert process_group.backend(own[0]) == "nccl" and devices.devices_used(own) == 2
    assert devices.describe(own) == "2 x NVIDIA H200"
    assert process_group.backend(torch.device("cpu")) == "gloo"
    assert devices.devices_used([torch.device("cpu")] * 2) == 2


def test_two_gpus_give_each_worker_its_own(cuda_count):
    cuda_count(2)
    assert [devices.device_for(r, 2) for r in (0, 1)] == [
        torch.device("cuda", 0),
        torch.device("cuda", 1),
    ]
    assert devices.unavailable(2, cuda=2) == ""


def test_describe_names_every_device():
    assert devices.describe([torch.device("cpu")] * 2) == "2 x CPU core"


def test_a_job_asks_for_the_gpus_it_will_use():
    # a machine with GPUs: at most its own, whatever the preset
    assert settings.gpu_request(2, machine_gpus=1, book=True) == 1
    assert settings.gpu_request(1, machine_gpus=2, book=False) == 1
    # one without (a laptop, a login node): what the job wants, under the book preset
    assert settings.gpu_request(2, machine_gpus=0, book=True) == 2
    assert settings.gpu_request(2, machine_gpus=0, book=False) == 0


@pytest.mark.parametrize(
    "wanted, machine_gpus, book, limit, asked",
    [
        (2, 2, True, 1, 1),  # --resources gpu=1 on 2 GPUs
        (8, 2, True, 1, 1),  # parameter_server's max_devices
        (8, 8, False, 4, 4),
        (2, 2, True, 4, 2),  # a limit above the want changes nothing
        (1, 2, True, 0, 0),  # --resources gpu=0: no GPU at all
        (8, 0, True, 2, 2),  # a login node, the book preset
        (8, 0, False, 2, 0),
    ],
)
def test_a_job_asks_for_no_more_gpus_than_the_run_may_use(wanted, machine_gpus, book, limit, asked):
    assert settings.gpu_request(wanted, machine_gpus=machine_gpus, book=book, limit=limit) == asked


@pytest.mark.parametrize(
    "machine_gpus, limit, cores, here, reason",
    [
        (1, None, 16, True, "needs 2 devices, the job that measured it could use 1 (1 GPU)"),
        (2, 1, 16, True, "needs 2 devices, the job that measured it could use 1 (1 GPU)"),
        (2, None, 16, True, ""),
        (2, 0, 16, True, ""),  # --resources gpu=0: its devices are cores
        (0, None, 2, True, ""),
        (0, None, 1, True, "needs 2 devices, the job that measured it could use 1 (1 CPU core)"),
        (1, None, 16, False, ""),  # planned for a cluster's node: decided there
    ],
)
def test_the_plan_finds_a_job_short_of_devices_as_the_job_would(
    machine_gpus, limit, cores, here, reason, cuda_count, monkeypatch
):
    """settings.planned_shortfall gives the reason devices.unavailable gives in the job, on
    the GPUs the job would lock (at most the run's limit) or the cores it would have."""
    planned = settings.planned_shortfall(
        2, machine_gpus=machine_gpus, limit=limit, cores=cores, here=here
    )
    assert planned.get("reason", "") == reason
    if here:
        gpus = min(2, machine_gpus, machine_gpus if limit is None else limit)
        cuda_count(gpus)
        monkeypatch.setattr(devices, "usable_cores", lambda: cores)
        assert devices.unavailable(2) == reason
        assert planned.get("gpus", gpus) == gpus


@pytest.mark.parametrize(
    "machine_gpus, limit, cores, reason",
    [
        (1, None, 16, ""),  # 2 workers share the GPU
        (2, 1, 16, ""),  # --resources gpu=1 on 2 GPUs
        (1, 0, 1, "needs 2 devices, the job that measured it could use 1 (1 CPU core)"),
        (0, None, 2, ""),
    ],
)
def test_the_plan_lets_workers_that_may_share_run_on_one_gpu_as_the_job_would(
    machine_gpus, limit, cores, reason, cuda_count, monkeypatch
):
    planned = settings.planned_shortfall(
        2, machine_gpus=machine_gpus, limit=limit, cores=cores, here=True, share=True
    )
    assert planned.get("reason", "") == reason
    cuda_count(min(machine_gpus, machine_gpus if limit is None else limit))
    monkeypatch.setattr(devices, "usable_cores", lambda: cores)
    assert devices.unavailable(2, share=True) == reason


@pytest.mark.parametrize(
    "machine_gpus, cores, reason",
    [
        (0, 16, "needs 2 GPUs, the job that measured it could use none"),  # cores do not do
        (1, 16, "needs 2 devices, the job that measured it could use 1 (1 GPU)"),
        (2, 1, ""),
    ],
)
def test_the_plan_finds_a_job_short_of_gpus_as_the_job_would(
    machine_gpus, cores, reason, cuda_count, monkeypatch
):
    """A job that needs GPUs (the book's one-process code): cores do not stand in for them."""
    planned = settings.planned_shortfall(
        2, machine_gpus=machine_gpus, limit=None, cores=cores, here=True, cuda=2
    )
    assert planned.get("reason", "") == reason
    cuda_count(machine_gpus)
    monkeypatch.setattr(devices, "usable_cores", lambda: cores)
    assert devices.unavailable(2, cuda=2) == reason


def test_a_job_given_fewer_gpus_than_the_machine_has_says_what_it_could_use(
    cuda_count, monkeypatch
):
    """Its lock left CUDA_VISIBLE_DEVICES one GPU: what it lacks is the job's, said as the
    evaluator says it of a job's machine record."""
    cuda_count(1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert devices.unavailable(2) == devices.unavailable(cuda=2) == TWO_ON_ONE_GPU
    cuda_count(0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert devices.unavailable(cuda=1) == f"needs CUDA, {WHO} none"


def test_every_rule_that_asks_for_gpus_locks_them(repo):
    """A GPU rule whose script forgot its lock would share cuda:0 with other jobs; one that
    shares a GPU locks it shared. The lock is the script's first statement after its
    imports (job.start), before anything could start CUDA."""
    blocks = [
        block
        for path in (repo / "workflow" / "rules").glob("*.smk")
        for block in re.split(r"\nrule ", path.read_text())[1:]
    ]
    locks = {}  # script -> how job.start must lock
    for block in blocks:
        script = re.search(r'"\.\./scripts/(\w+)\.py"', block)
        if re.search(r"needs\([^)]*gpus=", block):
            locks[script.group(1)] = "gpus=True"
        elif re.search(r"needs\([^)]*shared=True", block):
            locks[script.group(1)] = 'gpus="shared"'
    assert len(locks) == 10
    assert {s for s, c in locks.items() if "shared" in c} == {"lr_schedules_run", "warmup_sweep"}
    for script, lock in locks.items():
        source = (repo / "workflow" / "scripts" / f"{script}.py").read_text()
        statements = [
            line
            for line in source.splitlines()
            if line and not line.startswith(("import ", "from "))
        ]
        # The hand-over to the job server comes first: it runs the script again in its child.
        assert statements[0] == "job_server.hand_over(snakemake)", script
        assert statements[1].removeprefix("log = ").startswith("job.start(snakemake, " + lock), (
            script
        )


def test_place_puts_cpu_conv_weights_channels_last_without_changing_the_outputs():
    from d2lrepro.core import models

    x = torch.rand(8, 1, 28, 28)
    for build in (models.lenet, models.ScratchLeNet):
        default, placed = build(0), devices.place(build(0), "cpu")
        # a 1-channel kernel is the same in either layout
        weights = [p for p in placed.parameters() if p.dim() == 4 and p.shape[1] > 1]
        assert weights and all(
            p.is_contiguous(memory_format=torch.channels_last) and not p.is_contiguous()
            for p in weights
        )
        torch.testing.assert_close(placed(x), default(x), rtol=1e-5, atol=1e-6)


def test_a_job_given_one_gpu_of_two_runs_none_of_its_2_gpu_parts(cuda_count, monkeypatch, tmp_path):
    """`--resources gpu=1` on a 2-GPU machine: each job locks one GPU (CUDA_VISIBLE_DEVICES),
    and every part that needs 2 is not applicable, with the reason, instead of failing; what
    needs one device runs on the job's GPU (the fake CUDA's, on a machine without). The runs
    about the algorithm (data-parallel training, the printed examples) start 2 workers that
    share the GPU; the cost model, which times their steps, does not run."""
    from d2lrepro.multidevice import (
        cost_model,
        data_parallel,
        parameter_server,
        single_process,
    )
    from d2lrepro.multidevice.parts import launcher
    from d2lrepro.performance import autopar

    cuda_count(1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    # one phrasing, whether a part needs 2 devices or 2 CUDA devices
    two_devices = two_gpus = TWO_ON_ONE_GPU
    launched = []

    def launch(module, devices, argv, log_path, *args, share_gpus=False, **kwargs):
        launched.append((module.__name__.rsplit(".", 1)[1], devices, share_gpus, argv))
        if "--checkpoint" in argv:  # the training run's, which its job removes once done
            Path(argv[argv.index("--checkpoint") + 1]).touch()

    monkeypatch.setattr(launcher, "launch", launch)
    monkeypatch.setattr(paths, "CHECKPOINTS", tmp_path)
    run = {"model": "lenet", "devices": 2, "epochs": 1, "batch_size": 64, "lr": 0.1}
    history, log = tmp_path / "lenet.2.csv", tmp_path / "job.log"
    data_parallel.train("lenet.2", run, 0, None, history, tmp_path / "k", 1, 60, log)
    examples, costs = tmp_path / "examples.csv", {"lenet": tmp_path / "cost_lenet.csv"}
    cost_model.launch({"lenet": {}}, costs, examples, 0, 60, log)
    assert [launch[:3] for launch in launched] == [("worker", 2, True), ("cost_model", 2, True)]
    measured = launched[1][3]
    assert "--cost-model" not in measured and "--examples-out" in measured
    assert set(pd.read_csv(costs["lenet"])["note"].dropna()) == {two_devices}
    servers = tmp_path / "ps.csv"
    parameter_server.launch({"mb": 1, "repeats": 1, "max_devices": 8}, servers, 60, log)
    ps = pd.read_csv(servers)
    assert (ps["status"] == "not applicable").all() and set(ps["note"]) == {
        two_devices,
        f"no more devices than the 2-worker run's (needs 3 devices, {WHO} 1 (1 GPU))",
    }
    book = tmp_path / "book.csv"
    single_process.run_book({"lenet.2": run}, 0, None, {"lenet.2": book})
    assert pd.read_csv(book)["note"].tolist() == [f"the book's one-process path {two_gpus}"]
    assert {row["note"] for row in autopar.autopar_gpus()} == {two_gpus}


def module_decisions(tmp_path, monkeypatch) -> dict:
    """What each module that asks for the device count decides, with CUDA's work stubbed out:
    the devices hybridize.measure and hardware.memory_sweep time, the GPUs
    environment.describe records, and whether a 2-device run happens (launcher)."""
    from types import SimpleNamespace

    from d2lrepro.core import environment
    from d2lrepro.multidevice.parts import launcher
    from d2lrepro.performance import hardware, hybridize, hybridize_symbolic

    timed = []
    monkeypatch.setattr(hybridize_symbolic, "imperative_vs_symbolic", lambda: ([], ""))
    monkeypatch.setattr(hybridize, "hybridize", lambda device, **_: timed.append(device) or [])
    monkeypatch.setattr(hybridize, "serialize", lambda *_: [])
    cfg = {
        "batch_sizes": [1],
        "modes": ["eager"],
        "n_calls": 1,
        "max_run_time": 0.1,
        "cold_pairs": 5,
    }
    hybridize.measure(cfg, 0, tmp_path)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "a GPU")
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=1 << 30)
    )
    with monkeypatch.context() as m:
        m.setattr(hardware, "time_fn", lambda *_: {"median": 1.0})
        m.setattr(torch, "ones", lambda n, device: SimpleNamespace(sum=None))
        swept = sorted(set(hardware.memory_sweep(max_bytes=16 * 1024)["device"]))
    return {
        "hybridize": timed,
        "hardware": swept,
        "environment": environment.describe()["gpus"],
        "launcher": launcher.nodes_unavailable(1, 2),
    }


@pytest.mark.parametrize("gpus", [0, 1, 2])
def test_a_fake_device_count_reaches_every_module_that_asks(
    gpus, cuda_count, monkeypatch, tmp_path
):
    monkeypatch.setattr(devices, "usable_cores", lambda: 2)
    cuda_count(gpus)
    first_gpu = ["cuda:0"] if gpus else []
    assert module_decisions(tmp_path, monkeypatch) == {
        "hybridize": ["cpu", *first_gpu],
        "hardware": ["cpu", *first_gpu],
        "environment": ["a GPU"] * gpus,
        "launcher": TWO_ON_ONE_GPU if gpus == 1 else "",
    }


def test_no_module_binds_the_device_count_when_imported(repo):
    """``from .devices import cuda_count`` at the top of a module keeps the real function, and
    a test's fake never reaches it (on a machine with GPUs, it then decides on them)."""
    package = repo / "workflow" / "d2lrepro"
    for path in package.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("devices"):
                assert "cuda_count" not in {alias.name for alias in node.names}, path


@pytest.mark.parametrize(
    "machine_gpus, book, limit, share_limit, local, asked",
    [
        (1, True, 1, 4, True, {"gpu": 0, "gpu_share": 1}),  # one GPU, run here
        (2, False, 1, 4, True, {"gpu": 0, "gpu_share": 1}),  # --resources gpu=1
        (2, True, 0, 0, True, {"gpu": 0, "gpu_share": 0}),  # --resources gpu=0: the CPU
        (1, True, 1, 4, False, {"gpu": 1, "gpu_share": 0}),  # submitted to SLURM
        (0, True, None, None, True, {"gpu": 1, "gpu_share": 0}),  # a login node, book
        (0, False, None, None, True, {"gpu": 0, "gpu_share": 0}),
    ],
)
def test_a_job_that_only_trains_asks_for_a_share_of_a_gpu(
    machine_gpus, book, limit, share_limit, local, asked
):
    request = settings.shared_gpu_request(
        machine_gpus=machine_gpus, book=book, limit=limit, share_limit=share_limit, local=local
    )
    assert request == asked


class FakeNVML:
    """NVML's answers for GPUs ``GPU-a``, ``GPU-b``, ``GPU-c`` whose NVLink pairs are
    ``linked``."""

    def __init__(self, linked):
        self.linked = linked

    def nvmlInit_v2(self):
        return 0

    def nvmlDeviceGetHandleByUUID(self, uuid, handle):
        if uuid not in (b"GPU-a", b"GPU-b", b"GPU-c"):
            return 1
        handle.contents.value = uuid[-1]
        return 0

    def nvmlDeviceGetP2PStatus(self, one, two, index, status):
        assert index == devices.NVML_P2P_CAPS_INDEX_NVLINK
        pair = {chr(one.value), chr(two.value)}
        status.contents.value = 0 if pair in self.linked else 4  # NVML: not supported
        return 0


def test_nvlink_is_read_from_nvml_for_every_pair():
    gpus = ["GPU-a", "GPU-b", "GPU-c"]
    assert devices.nvlink_between(gpus[:2], FakeNVML([{"a", "b"}])) == ""
    assert devices.nvlink_between(gpus[:2], FakeNVML([])) == "no NVLink between GPU 0 and 1"
    half = FakeNVML([{"a", "b"}, {"a", "c"}])
    assert devices.nvlink_between(gpus, half) == "no NVLink between GPU 1 and 2"
    assert "does not know" in devices.nvlink_between(["GPU-z", "GPU-a"], half)
