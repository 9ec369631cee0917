"""Deterministic toy experiments: 2-D optimizer traces and the weight curves of the chapter,
all measured on the from-scratch optimizers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from d2lrepro.core import plotting
from d2lrepro.core.results import metric
from d2lrepro.optimization import optimizers

TRACE_COLUMNS = ["run", "optimizer", "step", "x1", "x2"]


def f_2d(x1, x2):
    return 0.1 * x1**2 + 2 * x2**2


def _hyper(run: dict) -> dict:
    return {k: v for k, v in run.items() if k != "optimizer"}


def run_traces(runs: dict, steps: int, start) -> pd.DataFrame:
    """Every step of every run, one row per point."""
    rows = []
    for name, run in runs.items():
        points = optimizers.trace_2d(
            run["optimizer"], steps=steps, start=tuple(start), **_hyper(run)
        )
        rows += [
            {"run": name, "optimizer": run["optimizer"], "step": t, "x1": x1, "x2": x2}
            for t, (x1, x2) in enumerate(points)
        ]
    return pd.DataFrame(rows, columns=TRACE_COLUMNS)


def trace_metrics(trace: pd.DataFrame) -> list[dict]:
    final = trace.loc[trace.groupby("run")["step"].idxmax()]
    return [
        m
        for row in final.itertuples()
        for m in (metric(f"{row.run}.x1_final", row.x1), metric(f"{row.run}.x2_final", row.x2))
    ]


def adagrad_metrics(runs: dict, steps: int, start) -> list[dict]:
    """For every Adagrad run on the 2-D problem, the exponent a of the decay t^-a of each
    coordinate's effective lr η / √(s_t + ε), with s_t read from the optimizer's state after
    each step t = 1..steps and a fitted on log-log axes. Beside it ('_steady'), the same
    optimizer fed the run's first gradient at every step: gradients that do not decay, so s_t
    grows linearly and a is about 1/2."""
    rows, t = [], np.arange(1, steps + 1)
    for name, run in runs.items():
        if run["optimizer"] != "adagrad":
            continue
        first = optimizers.grad_2d(torch.tensor(start, dtype=torch.float64))
        for suffix, gradient in (("", optimizers.grad_2d), ("_steady", lambda x, t: first.clone())):
            x = torch.tensor(start, dtype=torch.float64)
            walk = optimizers.walk("adagrad", x, gradient, steps, _hyper(run))
            s = np.array([state["s"].tolist() for state in walk])
            eff = run["lr"] / np.sqrt(s + optimizers.ADAGRAD_EPS)
            for coordinate, column in zip(("x1", "x2"), eff.T):
                a = -np.polyfit(np.log(t), np.log(column), 1)[0]
                rows.append(metric(f"{name}.eff_lr_decay{suffix}.{coordinate}", a))
    return rows


def draw_trace(points: pd.DataFrame, path) -> None:
    """The book's show_trace_2d: contours of f in blue, the trace '-o' in orange."""
    fig, ax = plotting.figure()
    ax.plot(points["x1"], points["x2"], "-o", color="#ff7f0e")
    x1, x2 = np.meshgrid(np.arange(-5.5, 1.0, 0.1), np.arange(-3.0, 1.0, 0.1), indexing="ij")
    ax.contour(x1, x2, f_2d(x1, x2), colors="#1f77b4")
    ax.set_xlabel("x1")
    ax.set_ylabel("x2")
    plotting.save(fig, path)


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
    h, rows = cfg["horizon"], []
    for beta in cfg["momentum_betas"]:
        w = momentum_weights(beta, h)
        rows += [
            metric(f"momentum_weight.beta{beta:g}.t{h - 1}", w[-1]),
            metric(f"momentum_weight.beta{beta:g}.sum", w.sum(), note=f"t = 0..{h - 1}"),
        ]
    long = cfg["rmsprop_sum_horizon"]
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
    for key, curve, values, name in (
        ("momentum_weights", momentum_weights, cfg["momentum_betas"], "beta"),
        ("rmsprop_weights", rmsprop_weights, cfg["rmsprop_gammas"], "gamma"),
    ):
        fig, ax = plotting.figure()
        for value in values:
            ax.plot(np.arange(h), curve(value, h), label=f"{name} = {value:.2f}")
        ax.set_xlabel("time")
        ax.legend()
        plotting.save(fig, figures[key])

    T, lambdas = cfg["scalar_horizon"], cfg["scalar_plotted"]
    fig, ax = plotting.figure(figsize=(6, 4))
    for lam, column in zip(lambdas, scalar_descent(cfg["scalar_eta"], lambdas, T).T):
        ax.plot(np.arange(T), column, label=f"lambda = {lam:.2f}")
    ax.set_xlabel("time")
    ax.legend()
    plotting.save(fig, figures["scalar"])
