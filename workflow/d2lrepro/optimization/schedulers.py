"""Learning-rate schedules of the book's lr-scheduler section (PyTorch edition; ``lrs.*``).

The three custom schedulers are the book's classes, value for value: each is called with
an update (epoch) index ``t`` and returns the learning rate. ``FactorScheduler`` is stateful
(every call multiplies), and ``CosineScheduler`` remembers the last cosine value it computed,
which is what it returns for ``t > max_update``.

The multi-step schedule is PyTorch's own ``MultiStepLR``; :func:`multistep_plot_values`
replays the book's plotting loop on a real optimizer.

:func:`schedule` gives the :class:`~d2lrepro.core.lr_hooks.Schedule` a training loop applies to
its optimizer (:func:`d2lrepro.core.training.train` calls its hooks), under two semantics:

``"as_written"``
    The book's cell and its ``train()``: the optimizer is built with the cell's lr, and a
    custom scheduler's ``scheduler(e)`` is written into the optimizer after epoch ``e``
    (0-based), as the book's ``train()`` does; ``MultiStepLR`` gets ``scheduler.step()``
    there. The scheduler object is the one the book has just plotted (its plot loop runs
    first), which matters for stateful schedulers and for ``MultiStepLR``, whose plot loop
    has already stepped it ``num_epochs`` times.

``"intended"``
    Epoch ``e`` runs with ``scheduler(e)`` from a fresh scheduler, and a fresh
    ``MultiStepLR`` (0.5 for epochs 0..14, 0.25 for 15..29): the schedule as plotted.

Which lr each epoch ran with is read from the optimizer during training, never derived here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from d2lrepro.core.lr_hooks import Schedule, set_lr

SEMANTICS = ("as_written", "intended")


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


def _multistep(optimizer, milestones: Sequence[int], gamma: float):
    # torch only here: the workflow reads RUNS when it parses, where torch costs a second
    from torch.optim.lr_scheduler import MultiStepLR

    return MultiStepLR(optimizer, milestones=list(milestones), gamma=gamma)


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
    import torch

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = _multistep(optimizer, milestones, gamma)
    return [_book_get_lr(optimizer, scheduler) for _ in range(n)]


@dataclass(frozen=True)
class Run:
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
RUNS: dict[str, Run] = {
    r.name: r
    for r in (
        Run("constant", "constant", 0.3, description="SGD, lr 0.3, no scheduler"),
        Run(
            "sqrt",
            "custom",
            0.1,
            make=lambda: SquareRootScheduler(lr=0.1),
            description="SquareRootScheduler(lr=0.1)",
        ),
        Run(
            "multistep",
            "multistep",
            0.5,
            milestones=(15, 30),
            gamma=0.5,
            description="MultiStepLR(SGD lr=0.5, milestones=[15, 30], gamma=0.5)",
        ),
        Run(
            "cosine",
            "custom",
            0.3,
            make=lambda: CosineScheduler(max_update=20, base_lr=0.3, final_lr=0.01),
            description="CosineScheduler(max_update=20, base_lr=0.3, final_lr=0.01)",
        ),
        Run(
            "warmup",
            "custom",
            0.3,
            make=lambda: CosineScheduler(20, warmup_steps=5, base_lr=0.3, final_lr=0.01),
            description="CosineScheduler(20, warmup_steps=5, base_lr=0.3, final_lr=0.01)",
        ),
    )
}


class OnTime(Schedule):
    """A custom scheduler applied on time: epoch ``e`` runs with ``scheduler(e)``."""

    def __init__(self, scheduler: Callable[[int], float], initial_lr: float):
        super().__init__(initial_lr)
        self.scheduler = scheduler

    def before_epoch(self, optimizer, epoch: int) -> None:
        set_lr(optimizer, self.scheduler(epoch))


class BookCustom(Schedule):
    """The book's ``train()`` with a custom scheduler: after epoch ``e``,
    ``for param_group in trainer.param_groups: param_group['lr'] = scheduler(epoch)``."""

    def __init__(self, scheduler: Callable[[int], float], initial_lr: float):
        super().__init__(initial_lr)
        self.scheduler = scheduler

    def after_epoch(self, optimizer, epoch: int) -> None:
        for param_group in optimizer.param_groups:
            param_group["lr"] = self.scheduler(epoch)


class BookMultiStep(Schedule):
    """``MultiStepLR`` built on the trainer, read and stepped ``plot_calls`` times by the
    book's plot loop, then ``scheduler.step()`` after each epoch (the book's ``train()``)."""

    def __init__(self, spec: Run, plot_calls: int):
        super().__init__(spec.initial_lr)
        self.spec, self.plot_calls = spec, plot_calls

    def start(self, optimizer) -> None:
        self.scheduler = _multistep(optimizer, self.spec.milestones, self.spec.gamma)
        for _ in range(self.plot_calls):
            _book_get_lr(optimizer, self.scheduler)

    def after_epoch(self, optimizer, epoch: int) -> None:
        self.scheduler.step()


def schedule(run: str | Run, semantics: str = "as_written") -> Schedule:
    """The schedule of one of the section's runs, for a training loop to apply.

    ``"as_written"``: the book's cell as it stands: the constructor lr, the scheduler object its
    plot has just advanced, applied after each epoch. ``"intended"``: a fresh scheduler on time.
    """
    _check(semantics)
    spec = RUNS[run] if isinstance(run, str) else run
    if spec.kind == "constant":
        return Schedule(spec.initial_lr)
    if spec.kind == "multistep":
        return BookMultiStep(spec, spec.plot_calls if semantics == "as_written" else 0)
    if spec.kind != "custom":
        raise ValueError(f"unknown run kind {spec.kind!r}")
    scheduler = spec.make()
    if semantics == "intended":
        return OnTime(scheduler, spec.initial_lr)
    values(scheduler, spec.plot_calls)  # the book's plot, which advances stateful schedulers
    return BookCustom(scheduler, spec.initial_lr)


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
    "Run",
    "RUNS",
    "OnTime",
    "BookCustom",
    "BookMultiStep",
    "schedule",
]
