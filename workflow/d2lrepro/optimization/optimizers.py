"""The optimization chapter's from-scratch optimizers, its 2-D traces and its airfoil training loop.

Each optimizer is one in-place update rule on a parameter tensor, as the book writes it, so the
same rule drives the 2-D traces (a float64 tensor holding (x1, x2)) and the airfoil regression.
:func:`train_airfoil` is the airfoil code path's loop: a new experiment on the airfoil data
reuses it. Through the traces, the weight curves and the airfoil sweeps these rules serve
``momentum.*``, ``adagrad.*``, ``rmsprop.*``, ``adadelta.*``, ``adam.*`` and
``data.train_ch11.sec_per_epoch``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import pandas as pd
import torch

from d2lrepro.core.results import exploded

COLUMNS = ["epoch", "examples", "loss", "elapsed", "eff_lr", "state_gap", "step_gap", "diverged"]
# Where the book's airfoil loops start: train_ch11 from b = 0, train_concise_ch11 from
# nn.Linear's default bias.
BOOK_START = {"scratch": "ch11", "torch": "concise"}


def _sgd_momentum(p, g, state, hyper):
    v = state["v"]
    v.copy_(hyper["momentum"] * v + g)
    p.sub_(hyper["lr"] * v)


ADAGRAD_EPS = 1e-6


def _adagrad(p, g, state, hyper, eps=ADAGRAD_EPS):
    s = state["s"]
    s.add_(g**2)
    p.sub_(hyper["lr"] * g / torch.sqrt(s + eps))


def adagrad_effective_lr(lr: float, s: torch.Tensor) -> float:
    """Adagrad's step size per unit gradient, η / √(s + ε), from its state ``s`` (the running
    sum of squared gradients): the median over the coordinates."""
    return (lr / torch.sqrt(s + ADAGRAD_EPS)).median().item()


class AdagradAudit:
    """Adagrad's state and steps set against the gradients it was fed, recorded apart from it
    (float64): ``state_gap``, the largest relative gap between the state s and the running sum
    of the squared gradients, and ``step_gap``, between the step a parameter took and
    η g / √(Σ g² + ε) computed from those gradients (relative to that step's norm); each the
    largest since the last :meth:`take`. A right Adagrad gives float rounding; an accumulator
    that keeps only the last g², sums |g| or a step without the square root give far more."""

    def __init__(self, lr: float, param: torch.Tensor):
        self.lr, self.param = lr, param
        self.total = torch.zeros(param.shape, dtype=torch.float64)
        self.state_gap = self.step_gap = 0.0
        self.audited = 0  # steps audited since the last take(): none reads NaN, not 0

    def before(self) -> None:
        self.grad = self.param.grad.detach().to(torch.float64).clone()
        self.start = self.param.detach().to(torch.float64).clone()

    def after(self, s: torch.Tensor) -> None:
        g, total = self.grad, self.total
        self.audited += 1
        total += g**2
        state = (s.to(torch.float64) - total).abs() / total.clamp_min(1e-300)
        self.state_gap = max(self.state_gap, state.max().item())
        expected = self.lr * g / torch.sqrt(total + ADAGRAD_EPS)
        taken = self.start - self.param.detach().to(torch.float64)
        norm = torch.linalg.vector_norm(expected).item()
        if norm > 0:
            step = torch.linalg.vector_norm(taken - expected).item() / norm
            self.step_gap = max(self.step_gap, step)

    def take(self) -> tuple[float, float]:
        gaps = (self.state_gap, self.step_gap) if self.audited else (math.nan, math.nan)
        self.state_gap = self.step_gap = 0.0
        self.audited = 0
        return gaps


def _rmsprop(p, g, state, hyper, eps=1e-6):
    gamma, s = hyper["gamma"], state["s"]
    s.copy_(gamma * s + (1 - gamma) * g**2)
    p.sub_(hyper["lr"] * g / torch.sqrt(s + eps))


def _adadelta(p, g, state, hyper, eps=1e-5):
    rho, s, delta = hyper["rho"], state["s"], state["delta"]
    s.copy_(rho * s + (1 - rho) * g**2)
    g = (
        torch.sqrt(delta + eps) / torch.sqrt(s + eps) * g
    )  # the rescaled gradient is the step itself
    p.sub_(g)
    delta.copy_(rho * delta + (1 - rho) * g**2)


def _adam(p, g, state, hyper, eps=1e-6, yogi=False, eps_inside=False):
    beta1, beta2, v, s, t = 0.9, 0.999, state["v"], state["s"], state["t"]
    eps = hyper.get("eps", eps)
    v.copy_(beta1 * v + (1 - beta1) * g)
    if yogi:  # s moves towards g**2 by at most (1 - beta2) * g**2, however large g**2 is
        s.add_((1 - beta2) * torch.sign(g**2 - s) * g**2)
    else:
        s.copy_(beta2 * s + (1 - beta2) * g**2)
    v_hat, s_hat = v / (1 - beta1**t), s / (1 - beta2**t)
    # The book scales by 1 / (√ŝ + ε); its text compares 1 / √(ŝ + ε), RMSProp's form.
    scale = torch.sqrt(s_hat + eps) if eps_inside else torch.sqrt(s_hat) + eps
    p.sub_(hyper["lr"] * v_hat / scale)
    state["t"] = t + 1  # kept per parameter so that the caller's hyper dict stays untouched


@dataclass(frozen=True)
class Optimizer:
    """An update rule, the state it keeps per parameter, and its torch.optim counterpart (if
    any)."""

    rule: Callable
    state: tuple[str, ...]
    concise: Callable | None  # (params, hyper) -> torch.optim.Optimizer


OPTIMIZERS = {
    "sgd_momentum": Optimizer(
        _sgd_momentum, ("v",), lambda ps, h: torch.optim.SGD(ps, lr=h["lr"], momentum=h["momentum"])
    ),
    "adagrad": Optimizer(_adagrad, ("s",), lambda ps, h: torch.optim.Adagrad(ps, lr=h["lr"])),
    "rmsprop": Optimizer(
        _rmsprop, ("s",), lambda ps, h: torch.optim.RMSprop(ps, lr=h["lr"], alpha=h["gamma"])
    ),
    "adadelta": Optimizer(
        _adadelta, ("s", "delta"), lambda ps, h: torch.optim.Adadelta(ps, rho=h["rho"])
    ),
    "adam": Optimizer(_adam, ("v", "s", "t"), lambda ps, h: torch.optim.Adam(ps, lr=h["lr"])),
    "yogi": Optimizer(partial(_adam, eps=1e-3, yogi=True), ("v", "s", "t"), None),
    "adam_eps_inside": Optimizer(partial(_adam, eps_inside=True), ("v", "s", "t"), None),
}


def init_states(optimizer: str, params: list[torch.Tensor]) -> list[dict]:
    """The book's init_*_states: zeros shaped like each parameter; the step count t starts at 1."""
    return [
        {k: 1 if k == "t" else torch.zeros_like(p) for k in OPTIMIZERS[optimizer].state}
        for p in params
    ]


def step(optimizer: str, params: list[torch.Tensor], states: list[dict], hyper: dict) -> None:
    """One from-scratch update of every parameter from its .grad, which is then zeroed."""
    rule = OPTIMIZERS[optimizer].rule
    with torch.no_grad():
        for p, state in zip(params, states):
            rule(p, p.grad, state, hyper)
            p.grad.zero_()


def torch_optimizer(
    optimizer: str, params: list[torch.Tensor], hyper: dict
) -> torch.optim.Optimizer:
    """The book's concise counterpart, with torch's own defaults for everything hyper does
    not set."""
    concise = OPTIMIZERS[optimizer].concise
    if concise is None:
        raise ValueError(f"{optimizer}: torch.optim has no counterpart")
    return concise(params, hyper)


def walk(optimizer: str, x: torch.Tensor, gradient: Callable, steps: int, hyper: dict):
    """The book's train_2d loop on any tensor ``x``, updated in place: before step t (from 0)
    x.grad = gradient(x, t), a fresh tensor (the step zeroes it); yields the optimizer's state
    after each step (live tensors: copy what you keep). 'gd' is sgd_momentum with momentum 0."""
    if optimizer == "gd":
        optimizer, hyper = "sgd_momentum", {**hyper, "momentum": 0.0}
    states = init_states(optimizer, [x])
    for t in range(steps):
        x.grad = gradient(x, t)
        step(optimizer, [x], states, hyper)
        yield states[0]


GRAD_SCALE_2D = (0.2, 4.0)


def grad_2d(x: torch.Tensor, t: int = 0) -> torch.Tensor:
    """The gradient of f(x) = 0.1 x1^2 + 2 x2^2 at x (the same at every step t)."""
    return torch.tensor(GRAD_SCALE_2D, dtype=x.dtype) * x


def trace_2d(
    optimizer: str, steps: int = 20, start=(-5.0, -2.0), **hyper
) -> list[tuple[float, float]]:
    """The book's train_2d on f(x) = 0.1 x1^2 + 2 x2^2: the start and the point after each step.

    Hyper-parameters take the registry's names: the book's eta is lr and its beta is momentum.
    """
    x = torch.tensor(start, dtype=torch.float64)  # float64, as the book's Python floats
    points = [tuple(x.tolist())]
    points += [tuple(x.tolist()) for _ in walk(optimizer, x, grad_2d, steps, hyper)]
    return points


def squared_loss(y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The book's squared_loss: half the squared error, per example."""
    return (y_hat - y.reshape(y_hat.shape)) ** 2 / 2


def airfoil_start(dim: int, generator: torch.Generator, start: str) -> list[torch.Tensor]:
    """The weights w ~ N(0, 0.01^2) (d x 1) and bias b a run starts from: b = 0 as train_ch11
    ('ch11'), or nn.Linear's default bias U(±1/√d), which train_concise_ch11 keeps ('concise')."""
    if start not in ("ch11", "concise"):
        raise ValueError(f"start must be 'ch11' or 'concise', not {start!r}")
    w = torch.normal(0.0, 0.01, size=(dim, 1), generator=generator)
    b = torch.zeros(1)
    if start == "concise":
        b.uniform_(-(dim**-0.5), dim**-0.5, generator=generator)
    return [w.requires_grad_(), b.requires_grad_()]


def train_airfoil(
    optimizer: str,
    hyper: dict,
    features: torch.Tensor,
    labels: torch.Tensor,
    epochs: int,
    batch_size: int = 10,
    seed: int = 0,
    implementation: str = "scratch",
    eval_every: int = 200,
    objective: str = "half_squared",
    start: str | None = None,
) -> pd.DataFrame:
    """The book's train_ch11 ('scratch') and train_concise_ch11 ('torch') as one loop: the
    loop of the airfoil code path.

    Linear regression X @ w + b, minimising the mean half squared error over minibatches of a
    fresh shuffle each epoch, from :func:`airfoil_start` (``start``; by default the book's for
    the implementation). Whenever the examples seen reach a multiple of eval_every, the loss over
    all the data is recorded with the training time so far (evaluation excluded). A loss that
    explodes (:func:`~d2lrepro.core.results.exploded`) ends the run, flagged in the column
    'diverged'.

    The objective is the book's half squared error ('half_squared', train_ch11) or the full
    squared error ('squared': the MSELoss of train_concise_ch11, twice the gradient); the
    recorded loss is always the half squared error, as the book plots it. The seed drives the
    initialisation and the shuffles, so a run is repeatable bit for bit; with start='ch11' both
    implementations start from the same w, b, so that they can be compared from one start.
    """
    generator = torch.Generator().manual_seed(seed)
    start = start or BOOK_START.get(implementation, "ch11")
    params = airfoil_start(features.shape[1], generator, start)
    w, b = params
    audit = None
    if implementation == "scratch":
        states = init_states(optimizer, params)
        update = partial(step, optimizer, params, states, hyper)
        if optimizer == "adagrad":  # its weights' state and steps, checked outside the timer
            audit, adagrad_update = AdagradAudit(hyper["lr"], w), update

            def update():
                nonlocal untimed
                t0 = time.perf_counter()
                audit.before()
                t1 = time.perf_counter()
                adagrad_update()
                t2 = time.perf_counter()
                audit.after(states[0]["s"])
                untimed += (t1 - t0) + (time.perf_counter() - t2)

    elif implementation == "torch":
        trainer = torch_optimizer(optimizer, params, hyper)

        def update():
            trainer.step()
            trainer.zero_grad()

    else:
        raise ValueError(f"implementation must be 'scratch' or 'torch', not {implementation!r}")

    if objective not in ("half_squared", "squared"):
        raise ValueError(f"objective must be 'half_squared' or 'squared', not {objective!r}")
    scale = 2.0 if objective == "squared" else 1.0

    def loss(X, y):
        return squared_loss(X @ w + b, y).mean()

    num_examples = len(labels)
    # Lazy, so each epoch's shuffle is drawn when that epoch begins.
    batches = (
        batch
        for _ in range(epochs)
        for batch in torch.randperm(num_examples, generator=generator).split(batch_size)
    )
    rows, n, elapsed, diverged, untimed = [], 0, 0.0, False, 0.0
    start = time.perf_counter()
    for batch in batches:
        (scale * loss(features[batch], labels[batch])).backward()
        update()
        n += len(batch)
        if n % eval_every == 0:
            elapsed += time.perf_counter() - start - untimed
            untimed = 0.0
            with torch.no_grad():
                value = loss(features, labels).item()
            # From-scratch Adagrad's state: the weights' effective lr (NaN for the others).
            eff_lr = (
                adagrad_effective_lr(hyper["lr"], states[0]["s"])
                if implementation == "scratch" and optimizer == "adagrad"
                else math.nan
            )
            state_gap, step_gap = audit.take() if audit else (math.nan, math.nan)
            rows.append(
                {
                    "epoch": n / num_examples,
                    "examples": n,
                    "loss": value,
                    "elapsed": elapsed,
                    "eff_lr": eff_lr,
                    "state_gap": state_gap,
                    "step_gap": step_gap,
                }
            )
            if exploded(value, rows[0]["loss"]):
                diverged = True
                break
            start = time.perf_counter()
    return pd.DataFrame(rows, columns=COLUMNS[:-1]).assign(diverged=diverged)
