import dataclasses

import pytest
import torch
import yaml

from conftest import verdict_of
from d2lrepro.optimization import optimizers, traces
from d2lrepro.pipeline import claims

# The book's printed `epoch 20, x1: %f, x2: %f` for each run of config.yaml (identical in EN, ZH,
# CL).
BOOK = {
    "momentum.gd_eta0.4": ("-0.943467", "-0.000073"),
    "momentum.gd_eta0.6": ("-0.387814", "-1673.365109"),
    "momentum.m2d_b0.5": ("0.007188", "0.002553"),
    "momentum.m2d_b0.25": ("-0.126340", "-0.186632"),
    "adagrad.2d_eta0.4": ("-2.382563", "-0.158591"),
    "adagrad.2d_eta2": ("-0.002295", "-0.000000"),
    "rmsprop.2d": ("-0.010599", "0.000000"),
}


@pytest.fixture(scope="module")
def config(repo):
    return yaml.safe_load((repo / "config.yaml").read_text())


def test_trace_csv_matches_the_book_to_six_decimals(config):
    cfg = config["traces"]
    steps = traces.run_traces(cfg["runs"], cfg["steps"], cfg["start"])
    assert list(steps.columns) == traces.TRACE_COLUMNS
    assert (steps.groupby("run")["step"].max() == 20).all()
    final = {m["metric"]: m["value"] for m in traces.trace_metrics(steps)}
    for run, (x1, x2) in BOOK.items():
        assert (f"{final[f'{run}.x1_final']:f}", f"{final[f'{run}.x2_final']:f}") == (x1, x2), run


def test_the_trace_figure_is_written(tmp_path):
    steps = traces.run_traces(
        {"momentum.gd_eta0.4": {"optimizer": "gd", "lr": 0.4}}, 5, (-5.0, -2.0)
    )
    traces.draw_trace(steps, tmp_path / "trace.png")
    assert (tmp_path / "trace.png").stat().st_size > 1000


RUN = "adagrad.2d_eta0.4"
CLAIM = "adagrad.effective_lr.2d"


def adagrad_rows(config):
    cfg = config["traces"]
    return traces.adagrad_metrics({RUN: cfg["runs"][RUN]}, cfg["steps"], cfg["start"])


def test_adagrad_state_and_steps_follow_the_recorded_gradients_and_decay_slower(config):
    rows = adagrad_rows(config)
    value = {r["metric"]: r["value"] for r in rows}
    assert value[f"{RUN}.state_gap"] < 1e-12 and value[f"{RUN}.step_gap"] < 1e-12
    for coordinate in ("x1", "x2"):
        assert 0 < value[f"{RUN}.eff_lr_decay.{coordinate}"] < 0.5
    assert verdict_of(CLAIM, rows) == claims.REPRODUCED


@pytest.mark.parametrize(
    "name, value",
    [
        ("state_gap", 2e-6),  # s_t is not the sum of the squared gradients
        ("step_gap", 2e-6),  # the step is not η g / √(Σ g² + ε)
        ("eff_lr_decay.x1", 0.55),  # faster than t^-1/2: s_t grows faster than linearly
        ("eff_lr_decay.x2", -0.1),  # the effective lr grows
    ],
)
def test_each_check_fails_on_evidence_against_the_book(config, name, value):
    rows = [
        {**row, "value": value} if row["metric"] == f"{RUN}.{name}" else row
        for row in adagrad_rows(config)
    ]
    assert any(row["value"] == value for row in rows)
    assert verdict_of(CLAIM, rows) == claims.NOT_REPRODUCED


def _adagrad_without_sqrt(p, g, state, hyper, eps=optimizers.ADAGRAD_EPS):
    s = state["s"]
    s.add_(g**2)
    p.sub_(hyper["lr"] * g / (s + eps))


def _adagrad_keeping_the_last_g2(p, g, state, hyper, eps=optimizers.ADAGRAD_EPS):
    s = state["s"]
    s.copy_(g**2)
    p.sub_(hyper["lr"] * g / torch.sqrt(s + eps))


def _adagrad_summing_abs_g(p, g, state, hyper, eps=optimizers.ADAGRAD_EPS):
    s = state["s"]
    s.add_(g.abs())
    p.sub_(hyper["lr"] * g / torch.sqrt(s + eps))


@pytest.mark.parametrize(
    "rule", [_adagrad_without_sqrt, _adagrad_keeping_the_last_g2, _adagrad_summing_abs_g]
)
def test_broken_adagrad_is_not_reproduced(config, monkeypatch, rule):
    broken = dataclasses.replace(optimizers.OPTIMIZERS["adagrad"], rule=rule)
    monkeypatch.setitem(optimizers.OPTIMIZERS, "adagrad", broken)
    rows = adagrad_rows(config)
    value = {r["metric"]: r["value"] for r in rows}
    assert max(value[f"{RUN}.state_gap"], value[f"{RUN}.step_gap"]) > 0.1
    assert verdict_of(CLAIM, rows) == claims.NOT_REPRODUCED
