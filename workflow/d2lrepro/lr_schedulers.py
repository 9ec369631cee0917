"""Learning-rate schedules of the book's lr-scheduler section (PyTorch edition).

The three custom schedulers are the book's classes, value for value: each is called with
an update (epoch) index ``t`` and returns the learning rate. ``FactorScheduler`` is stateful
(every call multiplies), and ``CosineScheduler`` remembers the last cosine value it computed,
which is what it returns for ``t > max_update``.

The multi-step schedule is PyTorch's own ``MultiStepLR``; :func:`multistep_plot_values`
replays the book's plotting loop on a real optimizer.

:func:`epoch_lrs` gives the learning rate each training *epoch* actually runs with, under
two semantics:

``"book"``
    What the book's ``train()`` does. Epoch 1 runs with the lr given to the optimizer's
    constructor; at the end of epoch ``e`` (0-based) a custom scheduler's ``scheduler(e)``
    is written into the optimizer, so epoch ``e + 1`` runs with ``scheduler(e)`` (the
    schedule is applied one epoch late and its last value is never used). For
    ``MultiStepLR`` the book trains with the scheduler its plotting loop has already
    stepped ``num_epochs`` times, so training runs at ``0.5 * 0.5**2 = 0.125`` throughout.
    The scheduler object used is the one the book has just plotted (its plot loop is
    replayed first), which matters only for stateful schedulers.

``"intended"``
    Epoch ``e`` runs with ``scheduler(e)`` from a fresh scheduler, and a fresh
    ``MultiStepLR`` (0.5 for epochs 0..14, 0.25 for 15..29): the schedule as plotted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

SEMANTICS = ("book", "intended")


class SquareRootScheduler:
    """``lr * (t + 1) ** -0.5``."""

    def __init__(self, lr: float = 0.1):
        self.lr = lr

    def __call__(self, num_update: int) -> float:
        return self.lr * pow(num_update + 1.0, -0.5)


class FactorScheduler:
    """Stateful: every call does ``base_lr = max(stop_factor_lr, base_lr * factor)`` and
    returns it."""

    def __init__(self, factor: float = 1, stop_factor_lr: float = 1e-7, base_lr: float = 0.1):
        self.factor = factor
        self.stop_factor_lr = stop_factor_lr
        self.base_lr = base_lr

    def __call__(self, num_update: int) -> float:
        self.base_lr = max(self.stop_factor_lr, self.base_lr * self.factor)
        return self.base_lr


class CosineScheduler:
    """Cosine decay from ``base_lr`` to ``final_lr`` at ``max_update``, after an optional
    linear warm-up.

    As in the book, for ``t > max_update`` it returns the last value it stored (``final_lr``
    once ``t == max_update`` has been seen). Unlike the book it does not fail when the first
    call is already past ``max_update``: it then stores ``final_lr``, the value the book's
    object holds after any call sequence that passes ``max_update``.
    """

    def __init__(
        self,
        max_update: int,
        base_lr: float = 0.01,
        final_lr: float = 0,
        warmup_steps: int = 0,
        warmup_begin_lr: float = 0,
    ):
        self.base_lr_orig = base_lr
        self.max_update = max_update
        self.final_lr = final_lr
        self.warmup_steps = warmup_steps
        self.warmup_begin_lr = warmup_begin_lr
        self.max_steps = self.max_update - self.warmup_steps

    def get_warmup_lr(self, epoch: int) -> float:
        increase = (
            (self.base_lr_orig - self.warmup_begin_lr) * float(epoch) / float(self.warmup_steps)
        )
        return self.warmup_begin_lr + increase

    def __call__(self, epoch: int) -> float:
        if epoch < self.warmup_steps:
            return self.get_warmup_lr(epoch)
        if epoch <= self.max_update:
            self.base_lr = (
                self.final_lr
                + (self.base_lr_orig - self.final_lr)
                * (1 + math.cos(math.pi * (epoch - self.warmup_steps) / self.max_steps))
                / 2
            )
        elif not hasattr(self, "base_lr"):
            self.base_lr = self.final_lr
        return self.base_lr


def values(scheduler: Callable[[int], float], n: int) -> list[float]:
    """The book's plot: ``[scheduler(t) for t in range(n)]`` (advances stateful schedulers)."""
    return [float(scheduler(t)) for t in range(n)]


def _multistep(lr: float, milestones: Sequence[int], gamma: float):
    # torch only here: the workflow reads EXPERIMENTS when it parses, where torch costs a second
    import torch

    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=lr)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(
        optimizer, milestones=list(milestones), gamma=gamma
    )
    return optimizer, scheduler


def _book_get_lr(optimizer, scheduler) -> float:
    """The book's ``get_lr``: read the lr, then ``trainer.step(); scheduler.step()``."""
    lr = scheduler.get_last_lr()[0]
    # no gradients: a no-op, as in the book, but keeps the step order PyTorch expects
    optimizer.step()
    scheduler.step()
    return float(lr)


def multistep_plot_values(
    n: int = 30, lr: float = 0.5, milestones: Sequence[int] = (15, 30), gamma: float = 0.5
) -> list[float]:
    """The book's multi-step plot: a real ``MultiStepLR`` read and stepped ``n`` times."""
    optimizer, scheduler = _multistep(lr, milestones, gamma)
    return [_book_get_lr(optimizer, scheduler) for _ in range(n)]


def _multistep_epoch_lrs(
    num_epochs: int, lr: float, milestones: Sequence[int], gamma: float, pre_steps: int
) -> list[float]:
    """Lr of each epoch of the book's ``train()`` with a built-in scheduler stepped
    ``pre_steps`` times first."""
    optimizer, scheduler = _multistep(lr, milestones, gamma)
    for _ in range(pre_steps):
        _book_get_lr(optimizer, scheduler)
    out = []
    for _ in range(num_epochs):
        out.append(float(optimizer.param_groups[0]["lr"]))
        optimizer.step()
        scheduler.step()  # the book steps it once at the end of each epoch
    return out


@dataclass(frozen=True)
class Experiment:
    """One training run of the section: which scheduler, and what the book's code feeds it.

    ``kind`` is ``"constant"``, ``"custom"`` (a callable scheduler built by ``make``) or
    ``"multistep"`` (PyTorch's ``MultiStepLR`` with ``milestones``/``gamma``).
    ``initial_lr`` is the lr passed to the optimizer's constructor in the book's cell;
    ``plot_calls`` is how often the book calls the scheduler (or ``get_lr``) for its plot
    before training with the same object.
    """

    name: str
    kind: str
    initial_lr: float
    make: Callable[[], Callable[[int], float]] | None = None
    milestones: tuple[int, ...] = ()
    gamma: float = 1.0
    plot_calls: int = 30
    description: str = field(default="", compare=False)


# The section's training runs (num_epochs = 30, batch 256), in the book's order.
EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment("constant", "constant", 0.3, description="SGD, lr 0.3, no scheduler"),
        Experiment(
            "sqrt",
            "custom",
            0.1,
            make=lambda: SquareRootScheduler(lr=0.1),
            description="SquareRootScheduler(lr=0.1)",
        ),
        Experiment(
            "multistep",
            "multistep",
            0.5,
            milestones=(15, 30),
            gamma=0.5,
            description="MultiStepLR(SGD lr=0.5, milestones=[15, 30], gamma=0.5)",
        ),
        Experiment(
            "cosine",
            "custom",
            0.3,
            make=lambda: CosineScheduler(max_update=20, base_lr=0.3, final_lr=0.01),
            description="CosineScheduler(max_update=20, base_lr=0.3, final_lr=0.01)",
        ),
        Experiment(
            "warmup",
            "custom",
            0.3,
            make=lambda: CosineScheduler(20, warmup_steps=5, base_lr=0.3, final_lr=0.01),
            description="CosineScheduler(20, warmup_steps=5, base_lr=0.3, final_lr=0.01)",
        ),
    )
}


def custom_epoch_lrs(
    make: Callable[[], Callable[[int], float]],
    num_epochs: int,
    semantics: str,
    initial_lr: float | None = None,
    plot_calls: int = 0,
) -> list[float]:
    """Per-epoch lr for a custom (callable) scheduler built by ``make()``.

    ``"book"``: ``[initial_lr, s(0), s(1), ..., s(num_epochs - 2)]`` where ``s`` has first been
    called ``plot_calls`` times (the book's plot). ``"intended"``:
    ``[s(0), ..., s(num_epochs - 1)]``
    from a fresh ``s``.
    """
    _check(semantics)
    scheduler = make()
    if semantics == "intended":
        return values(scheduler, num_epochs)
    if initial_lr is None:
        raise ValueError("book semantics need the optimizer's constructor lr (initial_lr)")
    values(scheduler, plot_calls)
    out = [float(initial_lr)]
    for epoch in range(num_epochs - 1):
        out.append(float(scheduler(epoch)))
    # the book also calls scheduler(num_epochs - 1) after the last epoch; that value is never used
    return out[:num_epochs]


def epoch_lrs(
    experiment: str | Experiment, num_epochs: int = 30, semantics: str = "book"
) -> list[float]:
    """Learning rate of each training epoch (0-based list) of one of the section's runs."""
    _check(semantics)
    exp = EXPERIMENTS[experiment] if isinstance(experiment, str) else experiment
    if exp.kind == "constant":
        return [float(exp.initial_lr)] * num_epochs
    if exp.kind == "custom":
        return custom_epoch_lrs(exp.make, num_epochs, semantics, exp.initial_lr, exp.plot_calls)
    if exp.kind == "multistep":
        pre = exp.plot_calls if semantics == "book" else 0
        return _multistep_epoch_lrs(num_epochs, exp.initial_lr, exp.milestones, exp.gamma, pre)
    raise ValueError(f"unknown experiment kind {exp.kind!r}")


def _check(semantics: str) -> None:
    if semantics not in SEMANTICS:
        raise ValueError(f"semantics must be one of {SEMANTICS}, not {semantics!r}")


__all__ = [
    "SEMANTICS",
    "SquareRootScheduler",
    "FactorScheduler",
    "CosineScheduler",
    "values",
    "multistep_plot_values",
    "Experiment",
    "EXPERIMENTS",
    "custom_epoch_lrs",
    "epoch_lrs",
]
