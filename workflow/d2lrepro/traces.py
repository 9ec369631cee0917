"""Deterministic toy experiments: 2-D optimizer traces and the weight curves of the chapter."""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import optimizers, plotting
from .results import metric

TRACE_COLUMNS = ["run", "optimizer", "step", "x1", "x2"]


def f_2d(x1, x2):
    return 0.1 * x1**2 + 2 * x2**2


def run_traces(runs: dict, steps: int, start) -> pd.DataFrame:
    """Every step of every run, one row per point."""
    rows = []
    for name, run in runs.items():
        hyper = {k: v for k, v in run.items() if k != "optimizer"}
        points = optimizers.trace_2d(run["optimizer"], steps=steps, start=tuple(start), **hyper)
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


def adagrad_metrics(trace: pd.DataFrame, runs: dict) -> list[dict]:
    """For every Adagrad run, the decay exponent of each coordinate's effective lr
    η / √(s_t + ε) over the steps, s_t being the running sum of the squared gradients of f at
    the points the trace visited (the optimizer's state)."""
    rows = []
    for name, run in runs.items():
        if run["optimizer"] != "adagrad":
            continue
        points = trace[trace["run"] == name].sort_values("step")
        steps = np.arange(1, len(points))
        for coordinate, scale in zip(("x1", "x2"), optimizers.GRAD_SCALE_2D):
            g = scale * points[coordinate].to_numpy()[:-1]  # the gradient at each point left
            eff = run["lr"] / np.sqrt(np.cumsum(g**2) + optimizers.ADAGRAD_EPS)
            slope = np.polyfit(np.log(steps), np.log(eff), 1)[0]
            rows.append(metric(f"{name}.eff_lr_slope.{coordinate}", slope))
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


def momentum_weights(beta: float, horizon: int) -> np.ndarray:
    """beta^t: the weight of the gradient t steps back in momentum's velocity."""
    return beta ** np.arange(horizon, dtype=np.float64)


def rmsprop_weights(gamma: float, horizon: int) -> np.ndarray:
    """(1 - gamma) gamma^t: the weight of the squared gradient t steps back in RMSProp's state."""
    return (1 - gamma) * gamma ** np.arange(horizon, dtype=np.float64)


def scalar_convergence(eta: float, lam: float, horizon: int) -> np.ndarray:
    """(1 - eta lambda)^t: gradient descent on f(x) = lambda x^2 / 2 from x = 1."""
    return (1 - eta * lam) ** np.arange(horizon, dtype=np.float64)


def weight_metrics(cfg: dict) -> list[dict]:
    h, rows = cfg["horizon"], []
    for beta in cfg["momentum_betas"]:
        rows.append(metric(f"momentum_weight.beta{beta:g}.t{h - 1}", momentum_weights(beta, h)[-1]))
    for gamma in cfg["rmsprop_gammas"]:
        w = rmsprop_weights(gamma, h)
        rows.append(metric(f"rmsprop_weight.gamma{gamma:g}.t0", w[0]))
        # Summed to a horizon long enough that the remainder gamma^T is below 1e-12.
        long = int(np.ceil(np.log(1e-12) / np.log(gamma)))
        rows.append(
            metric(f"rmsprop_weight.gamma{gamma:g}.sum", rmsprop_weights(gamma, long).sum())
        )
    eta, T = cfg["scalar_eta"], cfg["scalar_horizon"]
    for lam in cfg["scalar_lambdas"]:
        values = scalar_convergence(eta, lam, T)
        rows += [
            metric(f"scalar.lambda{lam:g}.t1", values[1]),
            metric(f"scalar.lambda{lam:g}.t{T - 1}", values[-1]),
        ]
    # The text's divergence claim, eta lambda > 2: one lambda past the edge.
    beyond = 2.1 / eta
    rows.append(metric("scalar.beyond_edge.abs_final", abs(scalar_convergence(eta, beyond, T)[-1])))
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

    T = cfg["scalar_horizon"]
    fig, ax = plotting.figure(figsize=(6, 4))
    for lam in cfg["scalar_lambdas"]:
        ax.plot(
            np.arange(T), scalar_convergence(cfg["scalar_eta"], lam, T), label=f"lambda = {lam:.2f}"
        )
    ax.set_xlabel("time")
    ax.legend()
    plotting.save(fig, figures["scalar"])
