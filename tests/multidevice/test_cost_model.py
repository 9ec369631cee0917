"""The cost model (d2lrepro.multidevice.cost_model): its workers, run as the launcher runs them,
and its summary: t1 against t2 where they balance, the printed examples, and the figure."""

import json

import pandas as pd
import pytest
import torch

from conftest import judged, machine_record, ok, run, shipped_claims, verdict_of
from d2lrepro.core import devices, results
from d2lrepro.core.models import LENET_SHAPES
from d2lrepro.multidevice import cost_model
from d2lrepro.multidevice.parts import launcher, worker
from d2lrepro.pipeline import explain
from d2lrepro.pipeline.claims import (
    INCONCLUSIVE,
    NOT_APPLICABLE,
    NOT_REPRODUCED,
    OBSERVED,
    REPRODUCED,
)


def by_name(rows):
    return {r["metric"]: r for r in rows}


def cost_table(steps, t1=(1.0, 2.0, 8.0), t2=(2.0, 2.1, 2.0), iqr=0.01):
    """The cost model's rows at three batches, each time with the IQR ``iqr`` over repeats."""
    return pd.DataFrame(
        {
            "batch_per_device": [16, 64, 256],
            "t1": t1,
            "t2": t2,
            "max_t1_t2": [max(a, b) for a, b in zip(t1, t2)],
            "measured_step": steps,
        }
    ).assign(t1_iqr=iqr, t2_iqr=iqr, step_iqr=iqr)


def test_cost_model_rows_for_each_model_of_the_spec(tmp_path):
    spec = {
        "lenet": {"batches": [2, 8], "repeats": 2, "out": str(tmp_path / "cost_lenet.csv")},
        "resnet18": {"batches": [1], "repeats": 1, "out": str(tmp_path / "cost_resnet18.csv")},
    }
    ok(run(["--cost-model", json.dumps(spec)], module=cost_model))
    lenet, resnet = (pd.read_csv(tmp_path / f"cost_{m}.csv") for m in spec)
    assert list(lenet.columns) == cost_model.COST_COLUMNS
    assert lenet["batch_per_device"].tolist() == [2, 8] and resnet["batch_per_device"].tolist() == [
        1
    ]
    assert (lenet["t1"] > 0).all() and (lenet["measured_step"] > 0).all()
    assert (lenet["max_t1_t2"] == lenet[["t1", "t2"]].max(axis=1)).all()
    assert set(lenet["params"]) == {
        sum(torch.Size(shape).numel() for shape in LENET_SHAPES.values())
    }
    assert set(resnet["model"]) == {"resnet18"}


def test_the_workers_have_a_command_line_of_their_own():
    """Measuring without training is not a mode of the training worker, and the cost model's
    workers need something to measure."""
    assert cost_model.parse_args(["--cost-model", "{}"]).cost_model == {}
    with pytest.raises(SystemExit):
        cost_model.parse_args(["--seed", "1"])
    with pytest.raises(SystemExit):
        worker.parse_args(["--cost-model", "{}", "--data", "x.pt", "--out", "y.csv"])
    argv = launcher.command(cost_model, 2, ["--examples-out", "e.csv"])
    assert "torch.distributed.run" in argv
    assert argv[-4:] == ["-m", "d2lrepro.multidevice.cost_model", "--examples-out", "e.csv"]


def test_one_launch_of_2_workers_makes_the_cost_model_and_the_examples(
    tmp_path, cpu_only, monkeypatch
):
    """The job starts this module as its 2 workers under torchrun, once for both."""
    monkeypatch.setattr(devices, "usable_cores", lambda: 2)
    costs = {"lenet": {"batches": [2], "repeats": 1}}
    outputs, examples = {"lenet": tmp_path / "lenet.csv"}, tmp_path / "examples.csv"
    cost_model.launch(costs, outputs, examples, 0, 60, tmp_path / "cost.log")
    assert set(pd.read_csv(outputs["lenet"])["world_size"]) == {2}
    rows = cost_model.example_metrics(results.read_metrics(examples))
    assert sorted(r["metric"] for r in rows) == sorted(cost_model.EXAMPLE_METRICS)
    for claim in ("mgpu.params", "mgpu.allreduce", "mgpu.split_and_load"):
        assert verdict_of(claim, rows) == REPRODUCED, claim
    # The book's scatter sends a shard to each GPU: CPU workers cannot run it.
    assert verdict_of("mgpu.scatter", rows) == NOT_APPLICABLE


def test_cost_metrics_judge_the_step_where_t1_and_t2_balance():
    cost = cost_table([3.0, 4.0, 10.0])
    m = {r["metric"]: r["value"] for r in cost_model.cost_metrics(cost, "lenet")}
    assert m["cost.lenet.t1_over_t2.smallest"] == 0.5 and m["cost.lenet.t1_over_t2.largest"] == 4
    assert m["cost.lenet.crossover_batch"] == 256
    # At 64, t1 / t2 = 2 / 2.1 is closest to 1: max 2.1, sum 4.1.
    assert m["cost.lenet.balanced.batch"] == 64
    assert m["cost.lenet.balanced.step_over_max"] == 4 / 2.1
    assert m["cost.lenet.balanced.sum_error"] == abs(4 / 4.1 - 1)
    assert m["cost.lenet.balanced.sum_error"] < m["cost.lenet.balanced.max_error"]
    flat = by_name(cost_model.cost_metrics(cost.assign(t2=100.0), "lenet"))
    assert flat["cost.lenet.crossover_batch"]["status"] == "failed"


def test_max_t1_t2_is_judged_on_two_gpus_with_the_spread_of_its_repeats():
    """The overlap the notes' model assumes is a GPU's (the all-reduce on a link of its own):
    CPU cores' numbers, timed alone (on a cluster's node; a run here plans them beside other
    jobs), are an observation of the machine, one GPU cannot judge it, and two judge it with
    the spread the times' IQRs over the repeats give each ratio."""

    def verdict(steps, gpus=2, **times):
        rows = cost_model.cost_metrics(cost_table(steps, **times), "lenet_ddp")
        return verdict_of("mgpu.cost_model", rows, {"cuda_devices": gpus})

    for steps in ([2.5, 2.3, 9.0], [3.0, 4.0, 10.0]):  # overlapped, serial
        assert verdict(steps, gpus=0) == OBSERVED
        assert verdict(steps, gpus=1) == NOT_APPLICABLE  # needs 2 GPUs
    assert verdict([2.5, 2.3, 9.0]) == REPRODUCED  # overlapped: max(t1, t2)
    assert verdict([3.0, 4.0, 10.0]) == NOT_REPRODUCED  # serial: t1 + t2
    # Repeats that spread as wide as the gap between max(t1, t2) and t1 + t2: no verdict.
    assert verdict([2.5, 2.3, 9.0], iqr=1.0) == INCONCLUSIVE
    # Communication dominates at the largest batch: the book's large enough b is not found.
    assert verdict([2.5, 2.3, 2.4], t1=(1.0, 2.0, 1.5)) == NOT_REPRODUCED


def test_where_the_step_lies_is_said_with_both_ratios():
    rows = cost_model.cost_metrics(cost_table([3.0, 4.0, 10.0]), "lenet_ddp")
    said = explain.explanation(shipped_claims()["mgpu.cost_model"], pd.DataFrame(rows))
    assert said.startswith(
        "At the balanced batch (64 examples per device, t1 / t2 = 0.95), the DDP step measured"
        " here took 1.90 times max(t1, t2) and 0.98 times t1 + t2: closer to t1 + t2"
    )
    # A step near max(t1, t2): the sentence would be false, and is not said.
    rows = cost_model.cost_metrics(cost_table([2.5, 2.3, 9.0]), "lenet_ddp")
    assert explain.explanation(shipped_claims()["mgpu.cost_model"], pd.DataFrame(rows)) == (
        explain.NOT_EXPLAINED
    )


def test_without_a_balanced_batch_the_cost_model_is_not_applicable():
    # t1 / t2 jumps from 1/3 to 3: max(t1, t2) is 3/4 of t1 + t2 at best, too close to judge.
    apart = cost_table([3.1, 6.1, 12.0], t1=(1.0, 6.0, 12.0), t2=(3.0, 2.0, 2.0))
    rows = by_name(cost_model.cost_metrics(apart, "lenet_ddp"))
    note = rows["cost.lenet_ddp.balanced.step_over_max"]["note"]
    assert rows["cost.lenet_ddp.balanced.step_over_max"]["status"] == "not applicable"
    assert "no balanced batch" in note and "communication is comparable" in note
    assert verdict_of("mgpu.cost_model", list(rows.values())) == NOT_APPLICABLE


def test_printed_examples_not_made_here_are_not_applicable():
    rows = cost_model.example_metrics(pd.DataFrame({"note": ["needs 2 devices"]}))
    assert [r["metric"] for r in rows] == cost_model.EXAMPLE_METRICS
    assert all(r["status"] == "not applicable" and r["note"] == "needs 2 devices" for r in rows)


def test_the_summary_writes_its_metrics_and_figure_naming_the_machine(tmp_path, footers):
    cost = tmp_path / "lenet.csv"
    pd.DataFrame({"note": ["needs 2 devices"], "machine": "m2"}).to_csv(cost, index=False)
    examples = tmp_path / "examples.csv"
    pd.DataFrame({"note": ["needs 2 devices"], "machine": "m2"}).to_csv(examples, index=False)
    records = {"m1": machine_record("node1", 1), "m2": machine_record("node2", 2)}
    out = tmp_path / "metrics.csv"
    cost_model.summarize([cost], examples, records, out, tmp_path / "cost.png")
    m = pd.read_csv(out).set_index("metric")
    assert m.loc["cost.lenet.crossover_batch", "machine"] == "m2"
    assert set(cost_model.EXAMPLE_METRICS) < set(m.index)
    assert "node2" in footers["cost"] and "node1" not in footers["cost"]
    assert (tmp_path / "cost.png").stat().st_size > 0


def test_without_two_devices_get_params_is_made_on_the_one_there_is(
    tmp_path, cpu_only, monkeypatch
):
    """mgpu.params needs one device: a job that may use one core (or one GPU) still judges
    it, on that device; the examples and the cost model that need 2 are not applicable."""
    monkeypatch.setattr(devices, "usable_cores", lambda: 1)
    costs = {"lenet": {"batches": [2], "repeats": 1}}
    outputs, examples = {"lenet": tmp_path / "lenet.csv"}, tmp_path / "examples.csv"
    cost_model.launch(costs, outputs, examples, 0, 60, tmp_path / "cost.log")
    rows = cost_model.example_metrics(results.read_metrics(examples))
    assert [r["metric"] for r in rows] == cost_model.EXAMPLE_METRICS
    assert {r["device"] for r in rows if r["metric"] in cost_model.ONE_DEVICE} == {"cpu"}
    assert verdict_of("mgpu.params", rows) == REPRODUCED
    for claim in ("mgpu.allreduce", "mgpu.scatter", "mgpu.split_and_load"):
        unmeasured = judged(claim, rows)
        assert unmeasured["verdict"] == NOT_APPLICABLE
        assert unmeasured["reason"].startswith("needs 2 devices")
    assert pd.read_csv(outputs["lenet"])["note"].iloc[0].startswith("needs 2 devices")
