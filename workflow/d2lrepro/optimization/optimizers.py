"""The optimization chapter's from-scratch optimizers and its 2-D traces.

Each optimizer is one in-place update rule on a parameter tensor, as the book writes it, so the
same rule drives the 2-D traces (a float64 tensor holding (x1, x2)) and the airfoil regression
(:func:`d2lrepro.optimization.airfoil.train_airfoil`). Through the traces, the weight curves
and the airfoil sweeps these rules serve
``momentum.*``, ``adagrad.*``, ``rmsprop.*``, ``adadelta.*``, ``adam.*`` and
``data.train_ch11.sec_per_epoch``; minibatch SGD is the baseline of ``adagrad.cost``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch


def _sgd(p, g, state, hyper):  # the book's minibatch SGD of train_ch11
    p.sub_(hyper["lr"] * g)


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
    "sgd": Optimizer(_sgd, (), lambda ps, h: torch.optim.SGD(ps, lr=h["lr"])),
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
