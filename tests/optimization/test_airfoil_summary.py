"""What the airfoil sweep measured (d2lrepro.optimization.airfoil_summary); the runs it reads
come from tests/optimization/test_airfoil.py's sweeps, where the summary is tested on them."""

import pandas as pd
import pytest

from d2lrepro.core import reference
from d2lrepro.core.results import RUN_SPREAD
from d2lrepro.optimization import airfoil_summary

BOOK = reference.load()


def test_a_setting_s_final_loss_is_the_median_over_its_seeds_with_their_quartiles_and_ends():
    runs = pd.DataFrame(
        {
            "setting": "momentum.lr0.02_m0.5",
            "implementation": "scratch",
            "seed": [0, 0, 1, 1, 2, 2],
            "epoch": [1.0, 2.0] * 3,
            "examples": [1500, 3000] * 3,
            "loss": [0.30, 0.25, 0.30, 0.24, 0.30, 0.27],
            "elapsed": [0.1, 0.2] * 3,
            "diverged": False,
            "host": "node1",
            "device": "cpu",
        }
    )
    rows = {m["metric"]: m["value"] for m in airfoil_summary.setting_metrics(runs, BOOK)}
    assert rows["momentum.lr0.02_m0.5.final_loss"] == pytest.approx(0.25)
    # The seeds' final losses 0.24, 0.25, 0.27: quartiles 0.245 and 0.26, extremes, 3 seeds.
    spread = {p: rows[f"momentum.lr0.02_m0.5.final_loss_{p}"] for p in RUN_SPREAD}
    assert spread == pytest.approx({"q1": 0.245, "q3": 0.26, "min": 0.24, "max": 0.27, "runs": 3})
    assert rows["momentum.lr0.02_m0.5.diverged_seeds"] == 0
    assert rows["momentum.lr0.02_m0.5.sec_per_epoch"] == pytest.approx(0.1)


def test_decay_exponent_reads_the_second_half():
    steps = pd.Series(range(1, 41), dtype=float)
    values = steps**-0.5 * (1 + (steps < 20) * 3.0)  # a start that is forgotten
    assert airfoil_summary.decay_exponent(steps.to_numpy(), values.to_numpy()) == pytest.approx(
        -0.5
    )
