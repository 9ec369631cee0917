"""The training loop a new single-device experiment reuses: minibatch SGD on in-memory
tensors, one row per epoch. It serves ``lrs.*`` (:mod:`d2lrepro.optimization.lr_schedules`
and :mod:`d2lrepro.optimization.warmup_sweep`).

It follows the book's ``train()`` (SGD without momentum, mean cross-entropy, the epoch's
running train loss/accuracy, test accuracy after each epoch) but keeps the data as tensors on
the device and draws minibatches from a seeded permutation instead of going through a
``DataLoader``. The other code paths have loops of their own: the airfoil regression
(:func:`d2lrepro.optimization.airfoil.train_airfoil`), the multi-device worker
(:func:`d2lrepro.multidevice.parts.worker.train`) and the book's one-process multi-GPU code
(:mod:`d2lrepro.multidevice.single_process`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence

import pandas as pd
import torch
from torch import nn

from d2lrepro.core.data import Data, evaluate_accuracy, prepare_data
from d2lrepro.core.devices import place
from d2lrepro.core.lr_hooks import EpochLrs, Schedule, set_lr
from d2lrepro.core.results import exploded
from d2lrepro.core.timing import Clock

# Per epoch: lr, loss, accuracies, speed, whether the loss exploded, how far the weights moved.
COLUMNS = ["epoch", "lr", "train_loss", "train_acc", "test_acc", "seconds", "samples_per_s"]
COLUMNS += ["diverged", "param_change"]
DIVERGENCE_CHECK_EVERY = 20  # batches between (synchronizing) checks for a non-finite loss


def train(
    net: nn.Module,
    data: Data | Mapping[str, torch.Tensor],
    epochs: int,
    schedule: Sequence[float] | Schedule,
    batch_size: int = 256,
    device="cpu",
    seed: int = 0,
    log: logging.Logger | None = None,
    on_epoch: Callable[[dict], None] | None = None,
    train_subset: int | None = None,
    test_subset: int | None = None,
    warmup_steps: int = 0,
) -> pd.DataFrame:
    """Train ``net`` in place with minibatch SGD; one row per epoch (see :data:`COLUMNS`).

    ``schedule``: the lr of each epoch, set before it, or a
    :class:`~d2lrepro.core.lr_hooks.Schedule` (such as the book's schedulers, built by
    :func:`d2lrepro.optimization.schedulers.schedule`), whose hooks run before each epoch and
    after it (after the test accuracy, where the book's ``train()`` applies its scheduler).
    With ``warmup_steps``, the first steps climb linearly to the epoch's lr (``lr * (s + 1) /
    warmup_steps`` at step ``s``). A row's ``lr`` is the largest lr the optimizer stepped with.
    Each epoch visits the training set in the order of a permutation drawn from a
    ``torch.Generator`` seeded with ``seed``; the last partial batch is kept.
    ``train_loss``/``train_acc`` are the means over the epoch's examples of the per-batch
    values seen during training (the book's running metrics); ``test_acc`` is measured after
    the epoch in eval mode; ``seconds`` covers the training pass only.
    A loss that explodes (non-finite, or :data:`~d2lrepro.core.results.DIVERGENCE_FACTOR`
    times the loss of the first batch, so that an explosion within the first epoch counts)
    ends the run: that epoch's row has ``diverged`` True (and ``test_acc`` NaN if the loss is
    not finite), and no later epochs are run (``df.attrs["diverged"]`` says whether this happened).
    ``on_epoch(row)`` is called with each row as a dict.
    """
    schedule = _as_schedule(schedule, epochs)
    device = torch.device(device)
    data = prepare_data(data, train_subset, test_subset, device)
    if len(data.train_y) == 0:
        raise ValueError("no training examples")
    place(net, device)
    net.train()
    optimizer = torch.optim.SGD(net.parameters(), lr=schedule.initial_lr)
    schedule.start(optimizer)
    generator = torch.Generator().manual_seed(seed)
    steps = Steps(net, optimizer, batch_size, warmup_steps)
    rows = []
    for epoch in range(epochs):
        schedule.before_epoch(optimizer, epoch)
        row = {"epoch": epoch + 1} | _train_epoch(steps, data, generator, device)
        schedule.after_epoch(optimizer, epoch)
        rows.append(row)
        if log is not None:
            _log_epoch(log, row, epochs)
        if on_epoch is not None:
            on_epoch(row)
        if steps.diverged:
            break
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame.attrs["diverged"] = steps.diverged
    return frame


def _as_schedule(schedule: Sequence[float] | Schedule, epochs: int) -> Schedule:
    """``schedule`` itself, or its lrs, one per epoch, as a :class:`EpochLrs`."""
    if isinstance(schedule, Schedule):
        return schedule
    if len(schedule) < epochs:
        raise ValueError(f"{epochs} epochs need {epochs} learning rates, got {len(schedule)}")
    return EpochLrs(schedule)


def _train_epoch(steps: Steps, data: Data, generator: torch.Generator, device) -> dict:
    """One timed pass of ``steps`` over the training set, in the order of a permutation drawn
    from ``generator``, then the test accuracy: the epoch's row without its number."""
    net = steps.net
    before = [p.detach().clone() for p in net.parameters()]
    net.train()
    with Clock(device) as clock:
        order = torch.randperm(len(data.train_y), generator=generator).to(device)
        loss_sum, correct, seen, lr = steps.epoch(data, order)
    train_loss = loss_sum.item() / seen  # read after the clock: it waits for the device
    steps.diverged = steps.diverged or exploded(train_loss, steps.start_loss)
    return {
        "lr": lr,
        "train_loss": train_loss,
        "train_acc": correct.item() / seen,
        "test_acc": evaluate_accuracy(net, data.test_x, data.test_y)
        if math.isfinite(train_loss)
        else math.nan,
        "seconds": clock.seconds,
        "samples_per_s": seen / clock.seconds if clock.seconds > 0 else math.nan,
        "diverged": steps.diverged,
        "param_change": _largest_change(net, before),
    }


def _largest_change(net: nn.Module, before: Sequence[torch.Tensor]) -> float:
    """How far the weights of ``net`` moved from ``before`` (its parameters, copied): the
    largest absolute change of any one."""
    return max((p.detach() - b).abs().max().item() for p, b in zip(net.parameters(), before))


def _log_epoch(log: logging.Logger, row: dict, epochs: int) -> None:
    log.info(
        "epoch %(epoch)d/%(epochs)d lr %(lr).4g: train loss %(train_loss).4f, train acc"
        " %(train_acc).4f, test acc %(test_acc).4f, %(seconds).2f s (%(samples_per_s).0f"
        " examples/s)%(flag)s",
        row | {"epochs": epochs, "flag": " DIVERGED" if row["diverged"] else ""},
    )


class Steps:
    """The SGD steps of a run, epoch after epoch: what they carry across epochs is the count
    of steps (for the warm-up), the fresh network's loss (what an explosion is measured
    against) and whether the loss has exploded."""

    def __init__(self, net: nn.Module, optimizer, batch_size: int, warmup_steps: int):
        self.net, self.optimizer, self.loss_fn = net, optimizer, nn.CrossEntropyLoss()
        self.batch_size, self.warmup_steps = batch_size, warmup_steps
        self.step, self.start_loss, self.diverged = 0, None, False

    def epoch(
        self, data: Data, order: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, int, float]:
        """One pass over the examples in ``order``: the loss summed over its examples and the
        correct predictions (on the device), the examples seen and the largest lr a step ran
        with. The warm-up's lr of a step sets the optimizer's lr, which is back at the epoch's
        after."""
        base_lr, lr = self.optimizer.param_groups[0]["lr"], -math.inf
        loss_sum = torch.zeros((), dtype=torch.float64, device=order.device)
        correct = torch.zeros((), dtype=torch.int64, device=order.device)
        seen = 0
        for b, i in enumerate(range(0, len(order), self.batch_size)):
            idx = order[i : i + self.batch_size]
            x, y = data.train_x[idx], data.train_y[idx]
            y_hat, loss, step_lr = self._step(x, y, base_lr)
            lr = max(lr, step_lr)
            with torch.no_grad():
                loss_sum += loss.detach().double() * len(y)
                correct += (y_hat.argmax(dim=1) == y).sum()
            seen += len(y)
            if (b + 1) % DIVERGENCE_CHECK_EVERY == 0 and not torch.isfinite(loss_sum).item():
                self.diverged = True
                break
        if self.warmup_steps:
            set_lr(self.optimizer, base_lr)  # the schedule goes on from the epoch's lr
        return loss_sum, correct, seen, lr

    def _step(
        self, x: torch.Tensor, y: torch.Tensor, base_lr: float
    ) -> tuple[torch.Tensor, torch.Tensor, float]:
        """One SGD step on the batch ``x``, ``y``: its predictions, its loss and the lr it ran
        with (in the warm-up, a share of ``base_lr`` that grows step by step)."""
        optimizer = self.optimizer
        if self.warmup_steps and self.step <= self.warmup_steps:
            set_lr(optimizer, base_lr * min(1.0, (self.step + 1) / self.warmup_steps))
        self.step += 1
        optimizer.zero_grad(set_to_none=True)
        y_hat = self.net(x)
        loss = self.loss_fn(y_hat, y)
        if self.start_loss is None:
            self.start_loss = loss.item()
        loss.backward()
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        return y_hat, loss, lr
