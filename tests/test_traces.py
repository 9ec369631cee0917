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


def test_adagrad_decays_as_t_to_the_minus_half_on_steady_gradients_and_slower_on_the_run(config):
    rows = adagrad_rows(config)
    value = {r["metric"]: r["value"] for r in rows}
    for coordinate in ("x1", "x2"):
        assert value[f"{RUN}.eff_lr_decay_steady.{coordinate}"] == pytest.approx(0.5, abs=1e-6)
        assert 0 < value[f"{RUN}.eff_lr_decay.{coordinate}"] < 0.5
    assert verdict_of(CLAIM, rows) == claims.REPRODUCED


@pytest.mark.parametrize(
    "name, value",
    [
        ("eff_lr_decay.x1", 0.45),  # about t^-1/2: s_t about linear
        ("eff_lr_decay.x2", -0.1),  # the effective lr grows
        ("eff_lr_decay_steady.x1", 0.3),  # steady gradients not giving t^-1/2
        ("eff_lr_decay_steady.x2", -0.5),
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


def _adagrad_without_accumulation(p, g, state, hyper, eps=optimizers.ADAGRAD_EPS):
    s = state["s"]
    s.copy_(g**2)
    p.sub_(hyper["lr"] * g / torch.sqrt(s + eps))


@pytest.mark.parametrize("rule", [_adagrad_without_sqrt, _adagrad_without_accumulation])
def test_broken_adagrad_is_not_reproduced(config, monkeypatch, rule):
    broken = dataclasses.replace(optimizers.OPTIMIZERS["adagrad"], rule=rule)
    monkeypatch.setitem(optimizers.OPTIMIZERS, "adagrad", broken)
    assert verdict_of(CLAIM, adagrad_rows(config)) == claims.NOT_REPRODUCED
