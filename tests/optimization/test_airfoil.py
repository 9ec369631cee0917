import math

import pandas as pd
import pytest
import torch

from d2lrepro.core import reference
from d2lrepro.optimization import airfoil, optimizers

BOOK = reference.load()


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(0)
    features = torch.randn(300, 5, generator=g)
    labels = features @ torch.tensor([0.5, -1.0, 0.2, 0.0, 0.3]) + 0.1 * torch.randn(
        300, generator=g
    )
    return {"features": features, "labels": labels}


SETTINGS = {
    "momentum.lr0.02_m0.5": {
        "implementation": "scratch",
        "optimizer": "sgd_momentum",
        "lr": 0.02,
        "momentum": 0.5,
    },
    "momentum.concise": {
        "implementation": "torch",
        "optimizer": "sgd_momentum",
        "lr": 0.005,
        "momentum": 0.9,
    },
    "adam.concise": {"implementation": "torch", "optimizer": "adam", "lr": 0.01},
}


def run(name, data, seeds=(0, 1)):
    return airfoil.run_setting(
        name, SETTINGS[name], data, seeds, {"scratch": 2, "torch": 1}, 10, 100
    )


def test_one_setting_over_seeds(data):
    runs = run("momentum.lr0.02_m0.5", data)
    assert set(runs["seed"]) == {0, 1}
    assert runs.groupby("seed")["examples"].max().tolist() == [600, 600]
    columns = {"setting", "implementation", "optimizer", "lr", "momentum", "loss", "elapsed"}
    assert columns | {"host"} <= set(runs.columns)
    assert runs.loc[runs.seed == 0, "loss"].tolist() != runs.loc[runs.seed == 1, "loss"].tolist()


def test_summary_takes_the_median_final_loss(data):
    runs = pd.concat(
        [run("momentum.lr0.02_m0.5", data, seeds=(0, 1, 2)), run("momentum.concise", data)]
    )
    summary = {m["metric"]: m["value"] for m in airfoil.summarize(runs, BOOK)}
    finals = runs[runs.setting == "momentum.lr0.02_m0.5"].groupby("seed")["loss"].last()
    assert summary["momentum.lr0.02_m0.5.final_loss"] == pytest.approx(finals.median())
    assert summary["momentum.concise.diverged_seeds"] == 0
    per_epoch = [
        summary[f"{s}.sec_per_epoch"] for s in ("momentum.lr0.02_m0.5", "momentum.concise")
    ]
    assert summary["airfoil.slowest_sec_per_epoch"] == max(per_epoch) > 0
    assert summary["airfoil.fastest_sec_per_epoch"] == min(per_epoch) > 0


def test_the_curve_judged_is_the_median_over_seeds(data):
    """One seed far off the book does not move the median: curve_excess reads the median."""
    runs = run("momentum.lr0.02_m0.5", data, seeds=(0, 1, 2))
    off = runs.assign(loss=runs["loss"].where(runs["seed"] != 2, 9.0))
    excess = {
        m["metric"]: m["value"] for m in airfoil.summarize(off, BOOK) if "curve" in m["metric"]
    }
    median = runs.assign(loss=runs["loss"].where(runs["seed"] != 2, runs["loss"].max()))
    again = {
        m["metric"]: m["value"] for m in airfoil.summarize(median, BOOK) if "curve" in m["metric"]
    }
    assert excess == again


def eps_finals(gaps, lr=0.01):
    """Final losses of the ε sweep at one lr: (ε, seed, outside, inside) per pair."""
    return pd.DataFrame(
        [
            {"eps": e, "lr": lr, "seed": s, "variant": v, "final_loss": loss}
            for e, s, outside, inside in gaps
            for v, loss in (("outside", outside), ("inside", inside))
        ]
    )


def test_eps_metrics_give_each_seed_one_vote():
    """A seed votes with the sign of its median gap over the ε that decide; ties (float32
    precision) are left out, and a seed with no decided ε does not vote."""
    gaps = [
        (1e-6, 0, 0.25, 0.25 + 1e-8),  # a tie
        (1e-2, 0, 0.240, 0.245),
        (1e-1, 0, 0.240, 0.246),
        (1e-3, 1, 0.240, 0.239),
        (1e-2, 1, 0.240, 0.243),
        (1e-1, 1, 0.240, 0.244),  # seed 1: median +0.003, one vote for outside
        (1e-1, 2, 0.250, 0.244),  # seed 2: one vote for inside
        (1e-1, 3, 0.250, 0.250),  # seed 3: a tie, no vote
    ]
    values = {m["metric"]: m["value"] for m in airfoil.eps_metrics(eps_finals(gaps))}
    assert values["adam.eps_sweep.seeds"] == 4
    assert (values["adam.eps_sweep.outside_lower"], values["adam.eps_sweep.inside_lower"]) == (2, 1)
    assert values["adam.eps_sweep.sign_p"] == pytest.approx(4 / 8)
    # Many ε of one seed are still one vote: 5 seeds must all agree for p < 0.05.
    many = [(e, s, 0.24, 0.25) for e in (1e-3, 1e-2, 1e-1) for s in range(4)]
    values = {m["metric"]: m["value"] for m in airfoil.eps_metrics(eps_finals(many))}
    assert values["adam.eps_sweep.sign_p"] == pytest.approx(1 / 16)
    five = {
        m["metric"]: m["value"]
        for m in airfoil.eps_metrics(eps_finals(many + [(0.1, 4, 0.24, 0.25)]))
    }
    assert five["adam.eps_sweep.sign_p"] == pytest.approx(1 / 32)
    gaps[-1] = (1e-1, 3, 0.250, math.nan)  # a variant diverged at its only lr
    (row,) = airfoil.eps_metrics(eps_finals(gaps))
    assert row["status"] == "failed"


def test_eps_metrics_judge_each_variant_at_its_best_lr():
    """At the book's lr ε inside ends lower for every seed, but ε outside at its own best lr
    ends lower still: the vote goes to ε outside. A run that diverged is only a bad lr."""
    seeds = range(5)
    finals = pd.concat(
        [
            eps_finals([(0.1, s, 0.250, 0.245) for s in seeds], lr=0.01),
            eps_finals([(0.1, s, 0.243, 0.248) for s in seeds], lr=0.02),
            eps_finals([(0.1, s, math.nan, 0.247) for s in seeds], lr=0.04),
        ]
    )
    best = airfoil.best_over_lr(finals)
    picked = {(r.seed, r.variant): (r.lr, r.final_loss) for r in best.itertuples()}
    assert len(picked) == len(best) == 10
    assert picked[0, "outside"] == (0.02, 0.243) and picked[0, "inside"] == (0.01, 0.245)
    values = {m["metric"]: m["value"] for m in airfoil.eps_metrics(finals)}
    assert (values["adam.eps_sweep.outside_lower"], values["adam.eps_sweep.inside_lower"]) == (5, 0)
    assert values["adam.eps_sweep.sign_p"] == pytest.approx(1 / 32)
    assert values["adam.eps_sweep.runs"] == 30
    at_one_lr = {m["metric"]: m["value"] for m in airfoil.eps_metrics(finals[finals["lr"] == 0.01])}
    assert at_one_lr["adam.eps_sweep.inside_lower"] == 5


def test_divergent_setting_is_recorded_not_raised(data):
    setting = {
        "implementation": "scratch",
        "optimizer": "sgd_momentum",
        "lr": 50.0,
        "momentum": 0.9,
    }
    runs = airfoil.run_setting("momentum.huge", setting, data, [0], {"scratch": 2}, 10, 100)
    summary = {m["metric"]: m["value"] for m in airfoil.summarize(runs, BOOK)}
    assert summary["momentum.huge.diverged_seeds"] == 1
    assert not math.isfinite(summary["momentum.huge.final_loss"])
    statuses = {m["metric"]: m["status"] for m in airfoil.summarize(runs, BOOK)}
    assert statuses["momentum.huge.final_loss"] == "failed"


def test_timings_from_different_hosts_are_not_compared(data, monkeypatch):
    """The slowest and fastest sec/epoch are not applicable once the settings ran on two
    hosts; each setting's own sec/epoch is still shown."""
    here = run("momentum.lr0.02_m0.5", data)
    monkeypatch.setattr(airfoil.socket, "gethostname", lambda: "node7")
    there = run("momentum.concise", data)
    ends = [f"airfoil.{e}_sec_per_epoch{s}" for e in ("slowest", "fastest") for s in ("", "_iqr")]
    rows = {m["metric"]: m for m in airfoil.summarize(pd.concat([here, there]), BOOK)}
    for name in ends:
        assert rows[name]["status"] == "not applicable" and "node7" in rows[name]["note"]
    assert rows["momentum.concise.sec_per_epoch"]["value"] > 0
    one_host = pd.concat([here.assign(host="node7"), there])
    rows = {m["metric"]: m for m in airfoil.summarize(one_host, BOOK)}
    assert all(rows[name]["status"] == "" for name in ends)


def test_scratch_and_torch_sgd_momentum_agree_but_adam_does_not_exactly(data):
    gaps = {
        m["metric"]: m["value"]
        for m in airfoil.compare_implementations(data, SETTINGS, 2, 10, 100, seed=0)
    }
    assert set(gaps) == {
        "momentum.concise.scratch_vs_torch_gap",
        "adam.concise.scratch_vs_torch_gap",
    }
    assert gaps["momentum.concise.scratch_vs_torch_gap"] < 1e-6
    assert gaps["adam.concise.scratch_vs_torch_gap"] > 0


def test_concise_runs_are_the_books_train_concise_ch11(data):
    """train_concise_ch11 trains on MSELoss from nn.Linear's default bias: the scratch
    optimizer at twice the lr from that start is the same run."""
    concise = run("momentum.concise", data, seeds=(0,))
    hyper = {"lr": 0.01, "momentum": 0.9}
    features, labels = data["features"], data["labels"]
    doubled, from_zero = (
        optimizers.train_airfoil(
            "sgd_momentum", hyper, features, labels, 1, 10, 0, eval_every=100, start=start
        )["loss"].to_numpy()
        for start in ("concise", "ch11")
    )
    assert concise["loss"].to_numpy() == pytest.approx(doubled, rel=1e-5)
    assert concise["loss"].to_numpy() != pytest.approx(from_zero, rel=1e-3)


def test_decay_exponent_reads_the_second_half():
    steps = pd.Series(range(1, 41), dtype=float)
    values = steps**-0.5 * (1 + (steps < 20) * 3.0)  # a start that is forgotten
    assert airfoil.decay_exponent(steps.to_numpy(), values.to_numpy()) == pytest.approx(-0.5)
