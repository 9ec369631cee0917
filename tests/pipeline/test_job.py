"""The opening every workflow script shares (d2lrepro.pipeline.job)."""

import json
import logging
import platform
import subprocess
import sys
from types import SimpleNamespace

import pytest

from d2lrepro.core import gpu_locks, logs, provenance
from d2lrepro.pipeline import job


def snakemake_object(log, gpu=0, threads=1, params=None):
    """What a script sees of its job: its log file, its resources, its threads."""
    return SimpleNamespace(
        log=[str(log)],
        resources=SimpleNamespace(gpu=gpu),
        threads=threads,
        input={},
        output={},
        params=params or {},
    )


@pytest.fixture(autouse=True)
def attribution_restored(monkeypatch):
    """A job's record names it in the environment (provenance.ATTRIBUTION) for the rows its
    process writes later: gone after each test, or later tests' rows would name it."""
    monkeypatch.setenv(provenance.ATTRIBUTION, "")
    monkeypatch.delenv(provenance.ATTRIBUTION)


# what logs.setup returns, in place of the job's log file
LOGGER = logging.getLogger("d2lrepro.a_job")


@pytest.fixture
def recorded(monkeypatch):
    """What start() did, in order; nothing is claimed, configured or set for real."""
    calls = []
    monkeypatch.setattr(logs, "setup", lambda path: calls.append(("log", path)) or LOGGER)
    monkeypatch.setattr(gpu_locks, "lock_gpus", lambda n, log: calls.append(("gpus", n, log)))
    monkeypatch.setattr("torch.set_num_threads", lambda n: calls.append(("threads", n)))
    return calls


def test_a_computing_job_claims_its_gpus_then_sets_its_threads(recorded, tmp_path):
    log = job.start(snakemake_object(tmp_path / "a.log", 2, 4), gpus=True, threads=True)
    assert log == LOGGER
    assert recorded == [("log", str(tmp_path / "a.log")), ("gpus", 2, LOGGER), ("threads", 4)]


def test_a_job_claims_and_sets_only_what_it_asks_for(recorded, tmp_path):
    job.start(snakemake_object(tmp_path / "a.log", 2, 4), threads=True)
    job.start(snakemake_object(tmp_path / "b.log", 2, 4))
    assert [call[0] for call in recorded] == ["log", "threads", "log"]


OPEN_A_LOG = """
import sys
from types import SimpleNamespace
from d2lrepro.pipeline import job

opened = SimpleNamespace(
    log=[sys.argv[1]], threads=1, input={}, output={}, params={}, resources=SimpleNamespace()
)
job.start(opened).info("hello")
print("torch" in sys.modules)
"""


def test_a_job_that_asks_for_nothing_logs_to_its_file_without_importing_torch(tmp_path):
    path = tmp_path / "job.log"
    result = subprocess.run(
        [sys.executable, "-c", OPEN_A_LOG, str(path)], capture_output=True, text=True
    )
    assert result.stdout.strip() == "False"
    assert "hello" in path.read_text()


@pytest.mark.parametrize("ran_alone", [True, False, None])
def test_a_job_that_times_records_whether_it_ran_alone(tmp_path, ran_alone):
    """A timing rule passes params.ran_alone on to its machine's record; other jobs record
    nothing of it."""
    params = {} if ran_alone is None else {"ran_alone": ran_alone}
    snakemake = snakemake_object(tmp_path / "a.log", params=params)
    snakemake.output = {"machines": str(tmp_path / "m.json")}
    job.start(snakemake, threads=True)
    (record,) = provenance.read(tmp_path / "m.json").values()
    assert record.get("ran_alone", "absent") == ("absent" if ran_alone is None else ran_alone)


START_SHORT = """
import json, sys
from types import SimpleNamespace
from d2lrepro.pipeline import job

gpus, when_short = int(sys.argv[4]), job.WhenShort[sys.argv[5]]
short = {"reason": "needs 2 devices, the job that measured it could use 1 (1 GPU)", "gpus": gpus}
opened = SimpleNamespace(
    log=[sys.argv[1]],
    threads=1,
    input=SimpleNamespace(environment=sys.argv[2]),
    output=SimpleNamespace(machines=sys.argv[3]),
    params={"ran_alone": True},
    resources=SimpleNamespace(gpu=0, shortfall=short["reason"], shortfall_gpus=short["gpus"]),
)
job.start(opened, gpus=True, workers=True, when_short=when_short)
print("torch" in sys.modules)
"""


@pytest.mark.parametrize("gpus, when_short", [(1, "NOTHING"), (0, "ONE_GPU")])
def test_a_job_the_plan_found_short_records_the_machine_without_torch(tmp_path, gpus, when_short):
    """It locks nothing and starts no torch; its record is the machine's, with the GPUs the
    plan would have given it, and its log says why it measures nothing. So does a job that
    measures what one GPU can (``WhenShort.ONE_GPU``) where the plan gave it none."""
    machine = {
        "host": platform.node(),
        "threads": None,
        "cuda_available": True,
        "cuda_version": "13.0",
        "cuda_devices": 8,
        "gpus": ["H200"] * 8,
        "gpu_memory_mib": [143000] * 8,
    }
    (tmp_path / "env.json").write_text(json.dumps(machine))
    paths = [tmp_path / name for name in ("job.log", "env.json", "m.json")]
    result = subprocess.run(
        [sys.executable, "-c", START_SHORT, *map(str, paths), str(gpus), when_short],
        capture_output=True,
        text=True,
    )
    assert result.stdout.strip() == "False", result.stderr
    (record,) = provenance.read(tmp_path / "m.json").values()
    assert (record["cuda_devices"], record["gpus"], record["threads"]) == (gpus, ["H200"] * gpus, 1)
    assert "as the run was planned: needs 2 devices" in (tmp_path / "job.log").read_text()


@pytest.mark.parametrize(
    "short, when_short",
    [
        (False, job.WhenShort.NOTHING),
        (True, job.WhenShort.ONE_DEVICE),
        (True, job.WhenShort.ONE_GPU),
    ],
)
def test_a_job_planned_to_share_locks_a_share_sets_its_threads_and_says_it_shared(
    monkeypatch, tmp_path, short, when_short
):
    """A job whose time no claim judges here (its `unjudged` resource), and one short of
    devices that still runs what one device can (``when_short``), take a share of a GPU
    instead of GPUs of their own, run torch on their one thread, and record that they did not
    run alone."""
    calls = []
    monkeypatch.setattr(gpu_locks, "lock_gpus", lambda *a, **k: calls.append("own GPUs"))
    monkeypatch.setattr(gpu_locks, "lock_shared_gpu", lambda *a: calls.append("a share"))
    monkeypatch.setattr("torch.set_num_threads", lambda n: calls.append(("threads", n)))
    why = "needs 2 devices, the job that measured it could use 1 (1 GPU)"
    snakemake = snakemake_object(tmp_path / "a.log", params={"ran_alone": True})
    snakemake.resources = SimpleNamespace(
        gpu=0, gpu_share=1, unjudged="" if short else why, shortfall=why if short else ""
    )
    snakemake.resources.shortfall_gpus = 1
    snakemake.output = {"machines": str(tmp_path / "m.json")}
    snakemake.config = {"jobs_per_gpu": 4}
    job.start(snakemake, gpus=True, workers=True, when_short=when_short)
    assert calls == ["a share", ("threads", 1)]
    (record,) = provenance.read(tmp_path / "m.json").values()
    assert record["ran_alone"] is False
    said = "not applicable here" if short else "no claim judges its time here"
    assert f"{said}, as the run was planned" in (tmp_path / "a.log").read_text()
