"""Optimization and deep learning (``intro.*``): the opening figures and the facts they
illustrate.

Each claim of the section is checked numerically with autograd on the same grids the book
plots, so the figures and the numbers come from one computation.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from d2lrepro.core import plotting
from d2lrepro.core.results import metric


def risk(x):
    """f: the risk, the expected loss over the whole population."""
    return x * torch.cos(math.pi * x)


def empirical_risk(x):
    """g: the empirical risk on finite data, f plus a wiggle."""
    return risk(x) + 0.2 * torch.cos(5 * math.pi * x)


def saddle(x):
    """f(x) = x³: the section's saddle point at 0."""
    return x**3


def grid(start: float, stop: float, step: float) -> torch.Tensor:
    return torch.arange(start, stop, step, dtype=torch.float64)


def local_minima(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Grid points strictly lower than both neighbours."""
    inner = (y[1:-1] < y[:-2]) & (y[1:-1] < y[2:])
    return x[1:-1][inner]


def derivatives_at(f, x0: float, order: int = 2) -> list[float]:
    """f'(x0), f''(x0), ... by repeated autograd."""
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    y, values = f(x), []
    for _ in range(order):
        (y,) = torch.autograd.grad(y, x, create_graph=True)
        values.append(y.item())
    return values


def measure(step: float) -> list[dict]:
    rows = []
    x = grid(0.5, 1.5, step)
    argmin_risk = x[risk(x).argmin()].item()
    argmin_empirical = x[empirical_risk(x).argmin()].item()
    rows += [
        metric("risk.argmin_risk", argmin_risk),
        metric("risk.argmin_empirical", argmin_empirical),
        metric("risk.argmin_gap", abs(argmin_risk - argmin_empirical), "|Δ|"),
    ]

    x = grid(-1.0, 2.0, step)
    minima = local_minima(x, risk(x))
    best = minima[risk(minima).argmin()]
    other = minima[risk(minima).argmax()]
    rows += [
        metric("local_min.count", len(minima)),
        metric("local_min.x_local", other.item()),
        metric("local_min.x_global", best.item()),
        metric("local_min.f_local", risk(other).item()),
        metric("local_min.f_global", risk(best).item()),
    ]

    d1, d2 = derivatives_at(saddle, 0.0)
    x = grid(-2.0, 2.0, step)
    left = x[x < 0].max()  # the figure's grid point nearest 0 from the left
    zero = torch.zeros((), dtype=torch.float64)
    rows += [
        metric("saddle_x3.d1_at_0", d1),
        metric("saddle_x3.d2_at_0", d2),
        # Negative: a point just left of 0 is lower, so 0 is not a minimum.
        metric("saddle_x3.f_left_minus_f_0", (saddle(left) - saddle(zero)).item()),
    ]

    hessian = torch.autograd.functional.hessian(
        lambda p: p[0] ** 2 - p[1] ** 2, torch.zeros(2, dtype=torch.float64)
    )
    eigenvalues = torch.linalg.eigvalsh(hessian)
    rows += [
        metric("saddle_x2y2.hessian_min_eig", eigenvalues.min().item()),
        metric("saddle_x2y2.hessian_max_eig", eigenvalues.max().item()),
    ]

    (tanh_grad,) = derivatives_at(torch.tanh, 4.0, order=1)
    rows.append(metric("vanishing.tanh_grad_at_4", tanh_grad))
    return rows


def draw(figures: dict[str, Path], step: float) -> None:
    """The book's five figures, with its annotations, into the paths named by ``figures``."""
    fig, ax = plotting.figure()
    x = grid(0.5, 1.5, step)
    plotting.plot_lines(
        ax, x, [risk(x), empirical_risk(x)], "x", "risk", legend=["risk", "empirical risk"]
    )
    plotting.annotate(ax, "min of\nempirical risk", (1.0, -1.2), (0.5, -1.1))
    plotting.annotate(ax, "min of risk", (1.1, -1.05), (0.95, -0.5))
    plotting.save(fig, figures["risk"])

    fig, ax = plotting.figure()
    x = grid(-1.0, 2.0, step)
    plotting.plot_lines(ax, x, [risk(x)], "x", "f(x)")
    plotting.annotate(ax, "local minimum", (-0.3, -0.25), (-0.77, -1.0))
    plotting.annotate(ax, "global minimum", (1.1, -0.95), (0.6, 0.8))
    plotting.save(fig, figures["local_min"])

    fig, ax = plotting.figure()
    x = grid(-2.0, 2.0, step)
    plotting.plot_lines(ax, x, [saddle(x)], "x", "f(x)")
    plotting.annotate(ax, "saddle point", (0, -0.2), (-0.52, -5.0))
    plotting.save(fig, figures["saddle_x3"])

    fig = plotting.pyplot().figure(figsize=plotting.BOOK_FIGSIZE)
    ax = fig.add_subplot(111, projection="3d")
    xs, ys = torch.meshgrid(
        torch.linspace(-1.0, 1.0, 101), torch.linspace(-1.0, 1.0, 101), indexing="ij"
    )
    ax.plot_wireframe(xs, ys, xs**2 - ys**2, rstride=10, cstride=10)
    ax.plot([0], [0], [0], "rx")
    for set_ticks in (ax.set_xticks, ax.set_yticks, ax.set_zticks):
        set_ticks([-1, 0, 1])
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_zlabel("f(x, y)")
    plotting.save(fig, figures["saddle_x2y2"])

    fig, ax = plotting.figure()
    x = grid(-2.0, 5.0, step)
    plotting.plot_lines(ax, x, [torch.tanh(x)], "x", "f(x)")
    plotting.annotate(ax, "vanishing gradient", (4, 1), (2, 0.0))
    plotting.save(fig, figures["vanishing"])
