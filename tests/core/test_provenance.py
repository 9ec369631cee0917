"""Which machine measured which number (d2lrepro.core.provenance), and claims judged from it."""

import json

import pandas as pd
import pytest

from conftest import node_record, shipped_claims
from d2lrepro.core import environment, provenance, results
from d2lrepro.pipeline import checks, claims


@pytest.fixture
def in_a_job(monkeypatch):
    """A job's process: what record_job attributes rows to is undone after the test."""
    monkeypatch.setenv(provenance.ATTRIBUTION, "")


def test_the_records_of_a_file_lie_beside_it():
    assert str(provenance.sidecar("results/a/metrics.csv")) == "results/a/metrics.machines.json"
    assert str(provenance.sidecar("runs/cosine.as_written.seed1.csv")) == (
        "runs/cosine.as_written.seed1.machines.json"
    )


def test_a_measuring_job_records_its_machine_and_its_rows_name_it(in_a_job, tmp_path):
    out = tmp_path / "metrics.machines.json"
    recorded = provenance.record_job(str(out), [], measures=True, threads=3)
    ((rid, rec),) = recorded.items()
    assert json.loads(out.read_text()) == recorded
    assert rec == environment.describe(3) and rid == provenance.record_id(rec)
    written = results.write_metrics([results.metric("a", 1.0)], tmp_path / "metrics.csv")
    assert list(written[provenance.COLUMN]) == [rid]
    # a row that names its machines keeps them
    kept = results.write_csv(pd.DataFrame({"x": [1], "machine": ["other"]}), tmp_path / "x.csv")
    assert list(kept[provenance.COLUMN]) == ["other"]


def test_a_summary_carries_the_records_of_what_it_read(in_a_job, tmp_path):
    one, two = tmp_path / "a.machines.json", tmp_path / "b.machines.json"
    provenance.write(one, {"r1": node_record("node1")})
    provenance.write(two, {"r2": node_record("node2", gpus=2)})
    out = tmp_path / "metrics.machines.json"
    recorded = provenance.record_job(str(out), [str(one), str(two)], measures=False)
    assert recorded == {"r1": node_record("node1"), "r2": node_record("node2", gpus=2)}
    assert provenance.attribution() == "r1 r2"  # its rows come from both jobs


@pytest.mark.filterwarnings("error")
def test_rows_read_back_with_no_machine_at_all_are_attributed_to_this_job(
    in_a_job, tmp_path, monkeypatch
):
    """pandas reads a machine column with no text in it as numbers (NaN)."""
    written = tmp_path / "m.csv"
    pd.DataFrame({"metric": ["a", "b"], "machine": ["", "r0"]}).to_csv(written, index=False)
    monkeypatch.setenv(provenance.ATTRIBUTION, "r1")
    read = pd.read_csv(written)
    assert list(provenance.attribute(read)[provenance.COLUMN]) == ["r1", "r0"]
    empty = read.assign(machine=float("nan"))
    assert list(provenance.attribute(empty)[provenance.COLUMN]) == ["r1", "r1"]


def test_a_job_without_a_machines_output_records_nothing(in_a_job):
    assert provenance.record_job(None, [], measures=True) == {}
    assert provenance.attribution() == ""


def test_a_row_must_name_a_recorded_machine():
    rows = pd.DataFrame({"metric": ["a", "b"], "machine": ["r1", ""]})
    with pytest.raises(ValueError, match="m.csv: a row names no machine"):
        provenance.records_of(rows, {"r1": node_record()}, "m.csv")
    with pytest.raises(KeyError, match="r2"):
        provenance.records_of(rows.assign(machine="r1 r2"), {"r1": node_record()}, "m.csv")
    assert provenance.records_of(rows.assign(machine="r1"), {"r1": node_record()}, "m.csv") == [
        node_record()
    ]


def test_unreadable_records_name_their_file(tmp_path):
    bad = tmp_path / "m.machines.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="m.machines.json"):
        provenance.read(bad)
    with pytest.raises(ValueError, match="missing.machines.json"):
        provenance.read(tmp_path / "missing.machines.json")


@pytest.mark.parametrize(
    "cores, applicable",
    [(1, False), (2, True)],
)
def test_a_claim_s_requirements_are_judged_from_the_job_that_measured_it(cores, applicable):
    """The run's overview (results/environment.json, made by a 1-core job without GPUs under
    SLURM) plays no part: autopar.both.cpu needs 2 cores, and the job that timed it is the one
    whose cores count, both ways."""
    claim = shipped_claims()["autopar.both.cpu"]
    rows = pd.DataFrame(
        [
            results.metric(m, 1.0, machine="job")
            for c in claim["checks"]
            for m in checks.metrics_of(c)
        ]
    ).drop_duplicates("metric")
    judged = claims.evaluate_claim(claim, rows, {"job": node_record("node7", cores=cores)})
    assert (judged["verdict"] != claims.NOT_APPLICABLE) == applicable, judged
    if not applicable:
        assert judged["reason"] == (
            "needs 2 CPU cores, the job that measured it (on node7) could use 1"
        )


def test_a_gpu_claim_is_judged_on_the_gpus_its_job_could_use():
    claim = shipped_claims()["hw.gpu"]
    names = [m for c in claim["checks"] for m in checks.metrics_of(c)]
    rows = pd.DataFrame([results.metric(m, 1.0, machine="job") for m in names])
    rows = rows.drop_duplicates("metric")
    on_cpu = claims.evaluate_claim(claim, rows, {"job": node_record(gpus=0)})
    # Numbers of a job without a GPU describe that machine: never a verdict on a GPU claim.
    assert on_cpu["verdict"] == claims.OBSERVED
    assert "(needs CUDA, the job that measured it (on node1) could use none:" in on_cpu["reason"]
    on_gpu = claims.evaluate_claim(claim, rows, {"job": node_record(gpus=1)})
    assert on_gpu["verdict"] != claims.NOT_APPLICABLE


def test_no_verdict_reads_the_run_s_overview(repo):
    """The evaluator is given the evidence and the records beside it, never the overview."""
    smk = (repo / "workflow" / "rules" / "report.smk").read_text()
    rule = smk[smk.index("rule evaluate_claims:") : smk.index("rule report:")]
    assert "ENVIRONMENT" not in rule and "environment" not in rule
    assert "machines=" in rule


def test_distinct_machines_are_hosts_with_what_their_jobs_could_use():
    found = provenance.distinct(
        [node_record("a", cores=1), node_record("a", cores=2, gpus=1), node_record("b", gpus=2)]
    )
    assert [(m["host"], m["cores"], m["cuda_devices"]) for m in found] == [
        ("a", [1, 2], [0, 1]),
        ("b", [2], [2]),
    ]


def test_a_claim_s_rows_name_the_hosts_that_measured_them():
    records = {"m1": {"host": "node1"}, "m2": {"host": "node2"}, "m3": {"host": "node1"}}
    rows = pd.DataFrame({"machine": ["m1", "m2 m3", None]})
    assert provenance.hosts_of(rows, records) == "node1, node2"
    assert provenance.hosts_of(rows[:1], records) == "node1"
    assert provenance.hosts_of(pd.DataFrame({"value": [1.0]}), records) == ""  # none named


def test_a_summary_row_names_the_devices_of_its_runs_each_once():
    gpu_runs = pd.DataFrame({"device": ["cuda:0", "cuda:0"]})
    assert provenance.devices_of(gpu_runs) == "cuda:0"
    mixed = pd.DataFrame({"device": ["cuda:0", "cpu, cuda:0", None, ""]})
    assert provenance.devices_of(gpu_runs, mixed) == "cpu, cuda:0"
    assert provenance.devices_of(pd.DataFrame({"devices": ["2 x A GPU"]})) == "2 x A GPU"
    assert provenance.devices_of(pd.DataFrame({"note": ["needs 2 devices"]})) == ""


def test_a_footer_of_cpu_runs_on_a_gpu_host_names_the_cpu_not_the_gpu():
    """The airfoil's optimizers train on the CPU even where the job could use a GPU."""
    records = {"gpu-host": node_record("node1", cores=16, gpus=1, threads=16)}
    runs = pd.DataFrame({"loss": [0.3, 0.25], "device": "cpu", "machine": "gpu-host"})
    assert provenance.footer(records, runs, where="runs") == (
        "measured on cpu (16 threads) of node1: Test CPU (16 cores), torch 2.13.0"
    )
    assert provenance.footer(records, runs, where="runs", threads=1).startswith(
        "measured on cpu (1 thread) of node1"
    )


def test_a_footer_says_where_a_job_that_times_shared_the_machine():
    records = {
        "alone": node_record("node1") | {"ran_alone": True},
        "shared": node_record("node1") | {"ran_alone": False},
    }
    runs = pd.DataFrame({"device": "cpu", "machine": ["alone", "shared"]})
    assert provenance.footer(records, runs, where="runs") == (
        "measured on cpu (2 threads) of node1: Test CPU (2 cores), torch 2.13.0; "
        "measured on cpu (2 threads) of node1: Test CPU (2 cores), torch 2.13.0,"
        " beside other jobs"
    )


def test_a_footer_names_the_gpus_a_job_s_cuda_devices_are_and_each_machine_once():
    records = {
        "a": node_record("node1", gpus=2) | {"gpus": ["GPU zero", "GPU one"]},
        "b": node_record("node2", cores=4, threads=1),
    }
    timed = pd.DataFrame(
        {"device": ["cpu", "cuda:1", "cuda:0+cuda:1", "cpu"], "machine": ["a", "a", "a", "b"]}
    )
    untimed = pd.DataFrame({"device": [None], "machine": ["b"]})
    assert provenance.footer(records, timed, untimed, where="t") == (
        "measured on cpu (2 threads), cuda:0+cuda:1 (GPU zero, GPU one), cuda:1 (GPU one)"
        " of node1: Test CPU (2 cores), torch 2.13.0; "
        "measured on cpu (1 thread) of node2: Test CPU (4 cores), torch 2.13.0"
    )
    # a machine whose rows measured nothing is named alone; nothing drawn, no footer
    assert (
        provenance.footer(records, untimed, where="t") == "node2: Test CPU (4 cores), torch 2.13.0"
    )
    assert provenance.footer(records, where="t") == ""
    with pytest.raises(ValueError, match="t: a row names no machine"):
        provenance.footer(records, timed.assign(machine=""), where="t")
