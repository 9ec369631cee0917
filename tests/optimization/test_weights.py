"""The weight curves of momentum and RMSProp and gradient descent on lambda x^2 / 2, measured on
the from-scratch optimizers: the book's closed forms, the claims' verdicts, and mutations."""

import dataclasses

import numpy as np
import pytest
import torch
import yaml

from conftest import verdict_of
from d2lrepro.optimization import optimizers, weights
from d2lrepro.pipeline import claims

CLAIMS = ("momentum.eff_weight", "momentum.effective_samples", "rmsprop.weights", "momentum.scalar")


@pytest.fixture(scope="module")
def cfg(repo):
    return yaml.safe_load((repo / "config.yaml").read_text())["weights"]


def mutate(monkeypatch, name, rule):
    """Swap the registry's update rule of ``name`` for a broken one."""
    broken = dataclasses.replace(optimizers.OPTIMIZERS[name], rule=rule)
    monkeypatch.setitem(optimizers.OPTIMIZERS, name, broken)


def test_the_measured_responses_are_the_books_formulas():
    t = np.arange(40)
    for beta in (0.95, 0.9, 0.6, 0.0):
        assert weights.momentum_weights(beta, 40) == pytest.approx(beta**t, abs=1e-12)
    for gamma in (0.95, 0.7):
        assert weights.rmsprop_weights(gamma, 40) == pytest.approx((1 - gamma) * gamma**t)
    x = weights.scalar_descent(0.1, [0.1, 19.0, 21.0], 20)
    assert x == pytest.approx((1 - 0.1 * np.array([0.1, 19.0, 21.0])) ** t[:20, None])


@pytest.mark.parametrize("claim", CLAIMS)
def test_the_implemented_optimizers_reproduce_the_claims(cfg, claim):
    assert verdict_of(claim, weights.weight_metrics(cfg)) == claims.REPRODUCED


# One metric per check, set to a value the book contradicts.
CONTRADICTIONS = {
    "momentum.eff_weight": [
        ("momentum_weight.beta0.95.t39", 0.9**39),
        ("momentum_weight.beta0.9.t39", 0.95**39),
        ("momentum_weight.beta0.6.t39", 0.01),
        ("momentum_weight.beta0.t39", 0.5),
        ("momentum_weight.beta0.6.sum", 20.0),  # a shorter memory than beta 0.9's would be
    ],
    "momentum.effective_samples": [
        ("momentum_weight.beta0.9.total", 9.85),  # the first 40 weights only
    ],
    "rmsprop.weights": [
        ("rmsprop_weight.gamma0.95.t0", 0.95),
        ("rmsprop_weight.gamma0.9.t0", 1.0),
        ("rmsprop_weight.gamma0.8.t0", 0.8),
        ("rmsprop_weight.gamma0.7.t0", 0.7),
        ("rmsprop_weight.gamma0.95.sum", 1 - 1e-6),
        ("rmsprop_weight.gamma0.9.sum", 10.0),
        ("rmsprop_weight.gamma0.8.sum", 0.9),
        ("rmsprop_weight.gamma0.7.sum", 1 + 1e-8),
    ],
    "momentum.scalar": [
        ("scalar.lambda10.t1", 1e-3),
        ("scalar.lambda19.t19", 0.135),
        ("scalar.lambda0.1.t19", 0.9),
        ("scalar.lambda5.abs_final", 0.5),  # slower than ηλ = 0.1
        ("scalar.lambda5.sign_flips", 0.5),
        ("scalar.lambda15.sign_flips", 0.0),
        ("scalar.lambda19.sign_flips", 18 / 19),
        ("scalar.lambda21.abs_final", 0.9),  # converged
    ],
}


@pytest.mark.parametrize(
    "claim, name, value", [(c, n, v) for c, edits in CONTRADICTIONS.items() for n, v in edits]
)
def test_each_check_fails_on_evidence_against_the_book(cfg, claim, name, value):
    rows = [
        {**row, "value": value} if row["metric"] == name else row
        for row in weights.weight_metrics(cfg)
    ]
    assert any(row["metric"] == name for row in rows)
    assert verdict_of(claim, rows) == claims.NOT_REPRODUCED


def _plain_sgd(p, g, state, hyper):  # the velocity forgets: v = g
    state["v"].copy_(g)
    p.sub_(hyper["lr"] * state["v"])


def _leaky_average(p, g, state, hyper):  # v = beta v + (1 - beta) g, an average, not a sum
    v, beta = state["v"], hyper["momentum"]
    v.copy_(beta * v + (1 - beta) * g)
    p.sub_(hyper["lr"] * v)


def _steps_with_gradient(p, g, state, hyper):  # keeps v but steps along g
    v = state["v"]
    v.copy_(hyper["momentum"] * v + g)
    p.sub_(hyper["lr"] * g)


# Mutation: each broken velocity sums its past gradients' weights to 1, not 1/(1 - beta).
@pytest.mark.parametrize("claim", ["momentum.eff_weight", "momentum.effective_samples"])
@pytest.mark.parametrize("rule", [_plain_sgd, _leaky_average, _steps_with_gradient])
def test_broken_momentum_is_not_reproduced(cfg, monkeypatch, rule, claim):
    mutate(monkeypatch, "sgd_momentum", rule)
    assert verdict_of(claim, weights.weight_metrics(cfg)) == claims.NOT_REPRODUCED


def _rmsprop_without_one_minus_gamma(p, g, state, hyper, eps=1e-6):
    s = state["s"]
    s.copy_(hyper["gamma"] * s + g**2)
    p.sub_(hyper["lr"] * g / torch.sqrt(s + eps))


def _rmsprop_gamma_swapped(p, g, state, hyper, eps=1e-6):
    gamma, s = hyper["gamma"], state["s"]
    s.copy_((1 - gamma) * s + gamma * g**2)
    p.sub_(hyper["lr"] * g / torch.sqrt(s + eps))


@pytest.mark.parametrize("rule", [_rmsprop_without_one_minus_gamma, _rmsprop_gamma_swapped])
def test_broken_rmsprop_is_not_reproduced(cfg, monkeypatch, rule):
    mutate(monkeypatch, "rmsprop", rule)
    assert verdict_of("rmsprop.weights", weights.weight_metrics(cfg)) == claims.NOT_REPRODUCED


def _half_lr(p, g, state, hyper):
    v = state["v"]
    v.copy_(hyper["momentum"] * v + g)
    p.sub_(0.5 * hyper["lr"] * v)


def _ascent(p, g, state, hyper):
    v = state["v"]
    v.copy_(hyper["momentum"] * v + g)
    p.add_(hyper["lr"] * v)


@pytest.mark.parametrize("rule", [_half_lr, _ascent])
def test_broken_gradient_descent_is_not_reproduced(cfg, monkeypatch, rule):
    mutate(monkeypatch, "sgd_momentum", rule)
    assert verdict_of("momentum.scalar", weights.weight_metrics(cfg)) == claims.NOT_REPRODUCED


def test_the_figures_are_drawn_from_the_measured_curves(tmp_path, cfg):
    figures = {k: tmp_path / f"{k}.png" for k in ("momentum_weights", "rmsprop_weights", "scalar")}
    weights.draw_weights(cfg, figures)
    assert all(p.stat().st_size > 1000 for p in figures.values())
