"""What a training loop does to its optimizer's learning rate, epoch by epoch: the hooks that
:func:`d2lrepro.core.training.train` calls, and the plainest schedules. The book's schedulers
(:mod:`d2lrepro.optimization.schedulers`) build on them.

No torch here: the workflow reads the lr-schedule experiments, and so this module, when it
parses, where importing torch would cost every snakemake call a second.
"""

from __future__ import annotations

from collections.abc import Sequence


class Schedule:
    """What a training loop does to its optimizer's lr: ``start`` on the optimizer built with
    ``initial_lr``, then ``before_epoch(optimizer, e)`` and ``after_epoch(optimizer, e)``
    around epoch ``e`` (0-based; after its test accuracy, where the book's ``train()`` applies
    its scheduler). This base class leaves the lr alone (a constant lr)."""

    def __init__(self, initial_lr: float):
        self.initial_lr = float(initial_lr)

    def start(self, optimizer) -> None:
        pass

    def before_epoch(self, optimizer, epoch: int) -> None:
        pass

    def after_epoch(self, optimizer, epoch: int) -> None:
        pass


class EpochLrs(Schedule):
    """Epoch ``e`` runs with ``lrs[e]``, set before it."""

    def __init__(self, lrs: Sequence[float]):
        super().__init__(lrs[0] if len(lrs) else 0.0)
        self.lrs = [float(lr) for lr in lrs]

    def before_epoch(self, optimizer, epoch: int) -> None:
        set_lr(optimizer, self.lrs[epoch])


def set_lr(optimizer, lr: float) -> None:
    """Every param group's lr."""
    for group in optimizer.param_groups:
        group["lr"] = float(lr)
