import math

import pandas as pd
import pytest
import torch

from d2lrepro import autopar

FAST = {"min_run_time": 0.01, "max_run_time": 0.2}


def by_name(rows):
    return {row["metric"]: row for row in rows}


def values(rows):
    return {row["metric"]: row["value"] for row in rows}


def test_autopar_cpu_with_tiny_sizes():
    threads = torch.get_num_threads()
    measured = values(autopar.autopar_cpu(size=32, n=3, **FAST))
    assert torch.get_num_threads() == threads
    for part in ("a", "b", "both"):
        assert measured[f"autopar.cpu.{part}.median_s"] > 0
    assert (
        measured["autopar.cpu.sum_s"]
        == measured["autopar.cpu.a.median_s"] + measured["autopar.cpu.b.median_s"]
    )
    assert measured["autopar.cpu.both_below_sum"] in (0, 1)


@pytest.mark.parametrize(
    "experiment, devices, reason",
    [
        (autopar.autopar_streams, 0, "needs CUDA, this machine has none"),
        (autopar.autopar_gpus, 1, "needs 2 CUDA devices, this machine has 1"),
        (autopar.copy_overlap, 0, "needs CUDA, this machine has none"),
    ],
)
def test_cuda_only_parts_are_not_applicable_without_cuda(experiment, devices, reason, cuda_count):
    cuda_count(devices)
    rows = experiment()
    assert rows and all(math.isnan(r["value"]) and r["note"] == reason for r in rows)
    assert len({r["metric"] for r in rows}) == len(rows)


def test_not_applicable_rows_have_the_measured_names(cuda_count):
    cuda_count(0)
    names = {r["metric"] for r in autopar.autopar_streams()}
    assert {
        n.replace(".cpu.", ".streams.") for n in values(autopar.autopar_cpu(size=8, n=1, **FAST))
    } == names


def test_figure(tmp_path, cuda_count):
    cuda_count(0)
    par = autopar.autopar_cpu(size=8, n=1, **FAST) + autopar.autopar_gpus()
    autopar.plot_autopar(pd.DataFrame(par), tmp_path / "par.png", "footer")
    assert (tmp_path / "par.png").stat().st_size > 0
