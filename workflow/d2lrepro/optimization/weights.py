"""The weight curves of the chapter, measured on the from-scratch optimizers: the weight of
past gradients in momentum's velocity and in RMSProp's state, and gradient descent on
lambda x^2 / 2 (``momentum.eff_weight``, ``momentum.effective_samples``, ``momentum.scalar``,
``rmsprop.weights``)."""

from __future__ import annotations

import numpy as np
import torch

from d2lrepro.core import plotting
from d2lrepro.core.results import metric
from d2lrepro.optimization import optimizers


def _impulse(optimizer: str, hyper: dict, horizon: int):
    """Feed the from-scratch optimizer one unit gradient at step 0 and zeros after, on one
    float64 parameter: yields how far each step moved the parameter, and the state after it."""
    x = torch.zeros(1, dtype=torch.float64)
    before = x.clone()
    for state in optimizers.walk(
        optimizer, x, lambda p, t: torch.full_like(p, float(t == 0)), horizon, hyper
    ):
        yield (before - x).item(), state
        before = x.clone()


def momentum_weights(beta: float, horizon: int) -> np.ndarray:
    """The weight of the gradient t steps back in momentum's velocity (the book's beta^t),
    measured: with lr 1, how far sgd_momentum moves the parameter t steps after the impulse."""
    hyper = {"lr": 1.0, "momentum": beta}
    return np.array([moved for moved, _ in _impulse("sgd_momentum", hyper, horizon)])


def rmsprop_weights(gamma: float, horizon: int) -> np.ndarray:
    """The weight of the squared gradient t steps back in RMSProp's state (the book's
    (1 - gamma) gamma^t), measured: the state s t steps after a unit squared-gradient impulse."""
    hyper = {"lr": 1.0, "gamma": gamma}
    return np.array([state["s"].item() for _, state in _impulse("rmsprop", hyper, horizon)])


def scalar_descent(eta: float, lambdas, horizon: int) -> np.ndarray:
    """Gradient descent (from scratch) on f(x) = lambda x^2 / 2 from x = 1, one column per
    lambda: the iterates x_0 .. x_{horizon-1} (the book plots (1 - eta lambda)^t)."""
    lam = torch.tensor(lambdas, dtype=torch.float64)
    x = torch.ones_like(lam)
    iterates = [x.tolist()]
    steps = optimizers.walk("gd", x, lambda p, t: lam * p, horizon - 1, {"lr": eta})
    iterates += [x.tolist() for _ in steps]
    return np.array(iterates)


def weight_metrics(cfg: dict) -> list[dict]:
    h, long, rows = cfg["horizon"], cfg["sum_horizon"], []
    for beta in cfg["momentum_betas"]:
        w, name = momentum_weights(beta, max(h, long)), f"momentum_weight.beta{beta:g}"
        rows += [
            metric(f"{name}.t{h - 1}", w[h - 1]),
            metric(f"{name}.sum", w[:h].sum(), note=f"t = 0..{h - 1}"),
            metric(f"{name}.total", w[:long].sum(), note=f"t = 0..{long - 1}"),
        ]
    for gamma in cfg["rmsprop_gammas"]:
        w = rmsprop_weights(gamma, long)
        rows += [
            metric(f"rmsprop_weight.gamma{gamma:g}.t0", w[0]),
            metric(f"rmsprop_weight.gamma{gamma:g}.sum", w.sum(), note=f"t = 0..{long - 1}"),
        ]
    T = cfg["scalar_horizon"]
    x = scalar_descent(cfg["scalar_eta"], cfg["scalar_lambdas"], T)
    flips = (x[1:] * x[:-1] < 0).mean(axis=0)  # the share of steps that flip the sign
    for lam, column, flip in zip(cfg["scalar_lambdas"], x.T, flips):
        rows += [
            metric(f"scalar.lambda{lam:g}.t1", column[1]),
            metric(f"scalar.lambda{lam:g}.t{T - 1}", column[-1]),
            metric(f"scalar.lambda{lam:g}.abs_final", abs(column[-1])),
            metric(f"scalar.lambda{lam:g}.sign_flips", flip),
        ]
    return rows


def draw_weights(cfg: dict, figures: dict) -> None:
    h = cfg["horizon"]
    for key, curve, values, name, weighed in (
        ("momentum_weights", momentum_weights, cfg["momentum_betas"], "beta", "gradient"),
        ("rmsprop_weights", rmsprop_weights, cfg["rmsprop_gammas"], "gamma", "squared gradient"),
    ):
        fig, ax = plotting.figure()
        for value in values:
            ax.plot(np.arange(h), curve(value, h), label=f"{name} = {value:.2f}")
        ax.set(xlabel="steps back", ylabel=f"weight of the {weighed}")
        plotting.legend_readable(ax)
        plotting.save(fig, figures[key])

    T, lambdas = cfg["scalar_horizon"], cfg["scalar_plotted"]
    fig, ax = plotting.figure(figsize=(6, 4))
    for lam, column in zip(lambdas, scalar_descent(cfg["scalar_eta"], lambdas, T).T):
        ax.plot(np.arange(T), column, label=f"lambda = {lam:.2f}")
    ax.set(xlabel="step", ylabel="x")
    plotting.legend_readable(ax)
    plotting.save(fig, figures["scalar"])
