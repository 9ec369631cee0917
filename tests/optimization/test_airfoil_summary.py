"""What the airfoil sweep measured (d2lrepro.optimization.airfoil_summary); the runs it reads
come from tests/optimization/test_airfoil.py's sweeps, where the summary is tested on them."""

import pandas as pd
import pytest

from d2lrepro.core import reference, results
from d2lrepro.core.results import RUN_SPREAD
from d2lrepro.optimization import airfoil_summary

BOOK = reference.load()


def test_a_setting_s_final_loss_is_the_median_over_its_seeds_with_their_quartiles_and_ends():
    runs = pd.DataFrame(
        {
            "setting": "momentum.lr0.02_m0.5",
            "implementation": "scratch",
            "optimizer": "sgd_momentum",
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


def timed(seconds: dict, hosts=("node1",)) -> pd.DataFrame:
    """Runs of the airfoil settings ``seconds`` names (setting -> (implementation, optimizer,
    hyper-parameters, sec/epoch)), one epoch on each of two seeds, the settings on ``hosts``
    in turn."""
    rows = [
        {"setting": name, "implementation": impl, "optimizer": optimizer, **hyper, "seed": seed}
        | {"epoch": 1.0, "examples": 1500, "loss": 0.25, "elapsed": time, "diverged": False}
        | {"host": hosts[i % len(hosts)], "device": "cpu"}
        for i, (name, (impl, optimizer, hyper, time)) in enumerate(seconds.items())
        for seed in (0, 1)
    ]
    return pd.DataFrame(rows)


def test_the_slowest_over_the_fastest_setting_is_torch_optims_part_times_the_update_rules():
    """A torch.optim end stands for its from-scratch twin (the same optimizer and configured
    hyper-parameters): the two parts multiply to the ratio of the ends; a setting the book did
    not run is neither an end nor a twin; a torch.optim end without a twin leaves both parts
    not applicable."""
    settings = {
        "momentum.lr0.005_m0.9": ("scratch", "sgd_momentum", {"lr": 0.005, "momentum": 0.9}, 0.10),
        "momentum.lr0.02_m0.5": ("scratch", "sgd_momentum", {"lr": 0.02, "momentum": 0.5}, 0.11),
        "adam.scratch_lr0.01": ("scratch", "adam", {"lr": 0.01}, 0.20),
        "adam.concise": ("torch", "adam", {"lr": 0.01}, 0.24),
        # Not the book's: neither the slowest end nor adam.concise's twin.
        "adam.eps_inside": ("scratch", "adam_eps_inside", {"lr": 0.01}, 0.30),
        "adam.again": ("scratch", "adam", {"lr": 0.01}, 0.12),
    }

    def parts(settings, hosts=("node1",)):
        rows = airfoil_summary.setting_metrics(timed(settings, hosts), BOOK)
        found = {m["metric"].removeprefix("airfoil."): m for m in rows}
        assert {found[p]["unit"] for p in airfoil_summary.ENDS_PARTS} == {"x"}
        return [found[p] for p in airfoil_summary.ENDS_PARTS]

    def said(settings):
        return [(round(m["value"], 6), m["note"]) for m in parts(settings)]

    assert said(settings) == [
        (1.2, "adam.concise over adam.scratch_lr0.01"),
        (2.0, "adam.scratch_lr0.01 over momentum.lr0.005_m0.9"),
    ]
    # torch.optim at the fast end: its twin over it (0.20 / 0.05 = 2 x 2).
    fast = settings | {
        "momentum.concise": ("torch", "sgd_momentum", {"lr": 0.005, "momentum": 0.9}, 0.05)
    }
    fast.pop("adam.concise")
    assert said(fast) == [
        (2.0, "momentum.lr0.005_m0.9 over momentum.concise"),
        (2.0, "adam.scratch_lr0.01 over momentum.lr0.005_m0.9"),
    ]
    scratch = {n: v for n, v in settings.items() if v[0] == "scratch"}
    assert said(scratch)[0] == (1.0, "1 by definition: both ends ran from scratch")
    # A torch.optim end whose momentum, γ or ρ no from-scratch setting shares: no twin.
    unmatched = {
        "momentum.concise": (
            "sgd_momentum",
            {"lr": 0.005, "momentum": 0.5},
            "momentum.lr0.005_m0.9",
            {"lr": 0.005, "momentum": 0.9},
        ),
        "rmsprop.concise": (
            "rmsprop",
            {"lr": 0.01, "gamma": 0.95},
            "rmsprop.scratch",
            {"lr": 0.01, "gamma": 0.9},
        ),
        "adadelta.concise": ("adadelta", {"rho": 0.95}, "adadelta.scratch", {"rho": 0.9}),
    }
    for name, (optimizer, hyper, other, its) in unmatched.items():
        ends = {name: ("torch", optimizer, hyper, 0.3), other: ("scratch", optimizer, its, 0.1)}
        for part in parts(ends):
            assert part["status"] == results.NOT_APPLICABLE and name in part["note"], part
    # Settings timed on two hosts, or none the book ran: not applicable, in their unit.
    for part in parts(settings, hosts=("node1", "node2")):
        assert part["status"] == results.NOT_APPLICABLE and "different hosts" in part["note"]
    for part in parts({"adam.eps_inside": settings["adam.eps_inside"]}):
        assert part["status"] == results.NOT_APPLICABLE


def test_decay_exponent_reads_the_second_half():
    steps = pd.Series(range(1, 41), dtype=float)
    values = steps**-0.5 * (1 + (steps < 20) * 3.0)  # a start that is forgotten
    assert airfoil_summary.decay_exponent(steps.to_numpy(), values.to_numpy()) == pytest.approx(
        -0.5
    )
