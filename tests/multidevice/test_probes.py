"""What the workers measure without training (d2lrepro.multidevice.probes), run as a
subprocess as the launcher runs it."""

import json

import pandas as pd
import pytest
import torch

from conftest import ok, run
from d2lrepro.core.models import LENET_SHAPES
from d2lrepro.multidevice import cost_model, launcher, probes, worker


def test_cost_model_rows_for_each_model_of_the_spec(tmp_path):
    spec = {
        "lenet": {"batches": [2, 8], "repeats": 2, "out": str(tmp_path / "cost_lenet.csv")},
        "resnet18": {"batches": [1], "repeats": 1, "out": str(tmp_path / "cost_resnet18.csv")},
    }
    ok(run(["--cost-model", json.dumps(spec)], module=probes))
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


def test_the_probes_have_a_command_line_of_their_own():
    """Measuring without training is not a mode of the training worker, and the probes need
    something to measure."""
    assert probes.parse_args(["--cost-model", "{}"]).cost_model == {}
    with pytest.raises(SystemExit):
        probes.parse_args(["--seed", "1"])
    with pytest.raises(SystemExit):
        worker.parse_args(["--cost-model", "{}", "--data", "x.pt", "--out", "y.csv"])
    argv = launcher.command(probes, 2, ["--examples-out", "e.csv"])
    assert "torch.distributed.run" in argv
    assert argv[-4:] == ["-m", "d2lrepro.multidevice.probes", "--examples-out", "e.csv"]
