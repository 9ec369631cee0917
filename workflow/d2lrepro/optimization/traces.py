"""The 2-D optimizer traces of the chapter, measured on the from-scratch optimizers: the book's
``show_trace_2d`` runs of gradient descent, momentum, Adagrad and RMSProp on
f(x1, x2) = 0.1 x1^2 + 2 x2^2, and the decay of Adagrad's effective lr on it
(``momentum.gd_*``, ``momentum.m2d_*``, ``adagrad.2d_*``, ``adagrad.effective_lr.2d``,
``rmsprop.2d``)."""

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
    """For every Adagrad run on the 2-D problem: the exponent a of the decay t^-a of each
    coordinate's effective lr η / √(s_t + ε), with s_t read from the optimizer's state after
    each step t = 1..steps and a fitted on log-log axes; and how far the optimizer strays
    from the book's rule, with the gradient of f at each point of the run recorded apart from
    it (by autograd on f): ``state_gap``, the largest relative gap between s_t and the sum of
    the recorded squared gradients, and ``step_gap``, between the step taken and
    η g_t / √(Σ g² + ε) from them (relative to that step's norm)."""
    rows, t = [], np.arange(1, steps + 1)
    for name, run in runs.items():
        if run["optimizer"] != "adagrad":
            continue
        x = torch.tensor(start, dtype=torch.float64)
        before, s, after = [], [], []

        def gradient(x, t):
            before.append(x.clone())
            return optimizers.grad_2d(x, t)

        for state in optimizers.walk("adagrad", x, gradient, steps, _hyper(run)):
            s.append(state["s"].clone())
            after.append(x.clone())
        points = torch.stack(before).requires_grad_()
        f_2d(points[:, 0], points[:, 1]).sum().backward()
        total = torch.cumsum(points.grad**2, dim=0)
        expected = run["lr"] * points.grad / torch.sqrt(total + optimizers.ADAGRAD_EPS)
        taken = points.detach() - torch.stack(after)
        state = torch.stack(s)
        state_gap = ((state - total).abs() / total).max().item()
        step_gap = (
            (
                torch.linalg.vector_norm(taken - expected, dim=1)
                / torch.linalg.vector_norm(expected, dim=1)
            )
            .max()
            .item()
        )
        rows += [
            metric(f"{name}.state_gap", state_gap, "|Δ|"),
            metric(f"{name}.step_gap", step_gap, "|Δ|"),
        ]
        eff = run["lr"] / np.sqrt(state.numpy() + optimizers.ADAGRAD_EPS)
        for coordinate, column in zip(("x1", "x2"), eff.T):
            a = -np.polyfit(np.log(t), np.log(column), 1)[0]
            rows.append(metric(f"{name}.eff_lr_decay.{coordinate}", a))
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
