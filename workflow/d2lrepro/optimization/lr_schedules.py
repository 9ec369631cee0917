"""Learning-rate scheduling: the book's schedule plots, and its LeNet trained under each schedule.

The training loop follows the book's ``train()`` (SGD without momentum, mean cross-entropy, the
epoch's running train loss/accuracy, test accuracy after each epoch) but keeps the data as
tensors on the device and draws minibatches from a seeded permutation instead of going
through a ``DataLoader``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from d2lrepro.core import plotting, reference
from d2lrepro.core.data import Data, evaluate_accuracy, prepare_data
from d2lrepro.core.devices import place
from d2lrepro.core.results import exploded, failed, late_iqr, metric, seed_spread
from d2lrepro.core.timing import Clock
from d2lrepro.optimization import schedulers as schedules

# Per epoch: lr, loss, accuracies, speed, whether the loss exploded, how far the weights moved.
COLUMNS = ["epoch", "lr", "train_loss", "train_acc", "test_acc", "seconds", "samples_per_s"]
COLUMNS += ["diverged", "param_change"]
DIVERGENCE_CHECK_EVERY = 20  # batches between (synchronizing) checks for a non-finite loss
EARLY_EPOCHS = 5
# The ledger id of each run's curve in the book (the book's code, so "book" semantics only).
BOOK_CURVE_IDS = {
    "constant": "lrs.baseline",
    "sqrt": "lrs.sqrt_train",
    "multistep": "lrs.multifactor_train",
    "cosine": "lrs.cosine_train",
    "warmup": "lrs.warmup_train",
}


def plot_values() -> dict[str, list[float]]:
    """The book's five schedule plots, value for value (30 updates; the factor one 50)."""
    return {
        "sqrt": schedules.values(schedules.SquareRootScheduler(lr=0.1), 30),
        "factor": schedules.values(
            schedules.FactorScheduler(factor=0.9, stop_factor_lr=1e-2, base_lr=2.0), 50
        ),
        "multistep": schedules.multistep_plot_values(30),
        "cosine": schedules.values(
            schedules.CosineScheduler(max_update=20, base_lr=0.3, final_lr=0.01), 30
        ),
        "warmup": schedules.values(
            schedules.CosineScheduler(20, warmup_steps=5, base_lr=0.3, final_lr=0.01), 30
        ),
    }


def set_lr_by_hand(trainer: torch.optim.Optimizer, lr: float) -> None:
    """The book's cell: ``trainer.param_groups[0]["lr"] = lr``."""
    trainer.param_groups[0]["lr"] = lr


def lr_after_setting_by_hand() -> float:
    """The lr SGD steps with once the book has set 0.1 by hand on its lr-0.3 trainer: one step
    on a known gradient, the step divided by the gradient."""
    param = torch.ones(1, dtype=torch.float64, requires_grad=True)
    trainer = torch.optim.SGD([param], lr=0.3)
    set_lr_by_hand(trainer, 0.1)
    gradient = torch.tensor([2.0], dtype=torch.float64)
    param.grad = gradient.clone()
    before = param.detach().clone()
    trainer.step()
    return ((before - param.detach()) / gradient).item()


def plot_metrics(values: dict[str, list[float]]) -> list[dict]:
    rows = [metric("set_lr.step_lr", lr_after_setting_by_hand())]
    for name, series in values.items():
        rows += [metric(f"{name}.t{t}", v) for t, v in enumerate(series)]
    return rows


def draw_plots(values: dict[str, list[float]], figures: dict) -> None:
    for name, series in values.items():
        fig, ax = plotting.figure()
        plotting.plot_lines(ax, np.arange(len(series)), [series])
        plotting.save(fig, figures[name])


def train(
    net: nn.Module,
    data: Data | Mapping[str, torch.Tensor],
    epochs: int,
    schedule: Sequence[float] | schedules.Schedule,
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
    :class:`~d2lrepro.optimization.schedulers.Schedule`, whose hooks run before each epoch and
    after it
    (after the test accuracy, where the book's ``train()`` applies its scheduler). With
    ``warmup_steps``, the first steps climb linearly to the epoch's lr (``lr * (s + 1) /
    warmup_steps`` at step ``s``). A row's ``lr`` is the largest lr the optimizer stepped with.
    Each epoch visits the training set in the order of a permutation drawn from a
    ``torch.Generator`` seeded with ``seed``; the last partial batch is kept.
    ``train_loss``/``train_acc`` are the means over the epoch's examples of the per-batch
    values seen during training (the book's running metrics); ``test_acc`` is measured after
    the epoch in eval mode; ``seconds`` covers the training pass only.
    A loss that explodes (non-finite, or :data:`~d2lrepro.core.results.DIVERGENCE_FACTOR` times the
    loss of the first batch, so that an explosion within the first epoch counts) ends the run:
    that epoch's row has ``diverged`` True (and ``test_acc`` NaN if the loss is not finite),
    and no later epochs are run (``df.attrs["diverged"]`` says whether this happened).
    ``on_epoch(row)`` is called with each row as a dict.
    """
    if not isinstance(schedule, schedules.Schedule):
        if len(schedule) < epochs:
            raise ValueError(f"{epochs} epochs need {epochs} learning rates, got {len(schedule)}")
        schedule = schedules.EpochLrs(schedule)
    device = torch.device(device)
    data = prepare_data(data, train_subset, test_subset, device)
    n = len(data.train_y)
    if n == 0:
        raise ValueError("no training examples")
    place(net, device)
    net.train()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=schedule.initial_lr)
    schedule.start(optimizer)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    diverged = False
    start_loss = None  # the fresh network's loss: what an explosion is measured against
    step = 0
    for epoch in range(epochs):
        schedule.before_epoch(optimizer, epoch)
        base_lr = optimizer.param_groups[0]["lr"]
        lr = -math.inf
        before = [p.detach().clone() for p in net.parameters()]
        net.train()
        with Clock(device) as clock:
            order = torch.randperm(n, generator=generator).to(device)
            loss_sum = torch.zeros((), dtype=torch.float64, device=device)
            correct = torch.zeros((), dtype=torch.int64, device=device)
            seen = 0
            for b, i in enumerate(range(0, n, batch_size)):
                idx = order[i : i + batch_size]
                x, y = data.train_x[idx], data.train_y[idx]
                if warmup_steps and step <= warmup_steps:
                    schedules.set_lr(optimizer, base_lr * min(1.0, (step + 1) / warmup_steps))
                step += 1
                optimizer.zero_grad(set_to_none=True)
                y_hat = net(x)
                loss = loss_fn(y_hat, y)
                if start_loss is None:
                    start_loss = loss.item()
                loss.backward()
                lr = max(lr, optimizer.param_groups[0]["lr"])  # what this step runs with
                optimizer.step()
                with torch.no_grad():
                    loss_sum += loss.detach().double() * len(y)
                    correct += (y_hat.argmax(dim=1) == y).sum()
                seen += len(y)
                if (b + 1) % DIVERGENCE_CHECK_EVERY == 0 and not torch.isfinite(loss_sum).item():
                    diverged = True
                    break
        if warmup_steps:
            schedules.set_lr(optimizer, base_lr)  # the schedule goes on from the epoch's lr
        seconds = clock.seconds
        train_loss = loss_sum.item() / seen
        diverged = diverged or exploded(train_loss, start_loss)
        row = {
            "epoch": epoch + 1,
            "lr": lr,
            "train_loss": train_loss,
            "train_acc": correct.item() / seen,
            "test_acc": evaluate_accuracy(net, data.test_x, data.test_y)
            if math.isfinite(train_loss)
            else math.nan,
            "seconds": seconds,
            "samples_per_s": seen / seconds if seconds > 0 else math.nan,
            "diverged": diverged,
            "param_change": max(
                (p.detach() - b).abs().max().item() for p, b in zip(net.parameters(), before)
            ),
        }
        schedule.after_epoch(optimizer, epoch)
        rows.append(row)
        if log is not None:
            log.info(
                "epoch %(epoch)d/%(epochs)d lr %(lr).4g: train loss %(train_loss).4f, train acc"
                " %(train_acc).4f, test acc %(test_acc).4f, %(seconds).2f s (%(samples_per_s).0f"
                " examples/s)%(flag)s",
                row | {"epochs": epochs, "flag": " DIVERGED" if diverged else ""},
            )
        if on_epoch is not None:
            on_epoch(row)
        if diverged:
            break
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame.attrs["diverged"] = diverged
    return frame


def _run_values(h: pd.DataFrame) -> dict:
    """One seed's numbers: final accuracies, the train-test gap, early test accuracy, the gains
    of the second half, and the quirks of the book's code."""
    last = h.iloc[-1]
    second = h.iloc[1] if len(h) > 1 else pd.Series(math.nan, index=h.columns)
    return {
        "train_loss": last.train_loss,
        "train_acc": last.train_acc,
        "test_acc": last.test_acc,
        "gap": last.train_acc - last.test_acc,
        "early_test_acc": h["test_acc"].head(EARLY_EPOCHS).mean(),
        "samples_per_s": h["samples_per_s"].median(),
        # Does the second half of training still help? (the book: test accuracy stalls
        # while train accuracy keeps rising)
        "late_test_gain": h["test_acc"].iloc[len(h) // 2 :].max()
        - h["test_acc"].iloc[: len(h) // 2].max(),
        "late_train_gain": last.train_acc - h["train_acc"].iloc[len(h) // 2 - 1],
        # Quirks of the book's code, whatever the scale: the lrs the epochs ran with (as the
        # optimizer held them), how far the weights moved in epoch 2, and the test accuracy of
        # epochs 1 and 2 (NaN without epoch 2).
        "lr_min": h["lr"].min(),
        "lr_max": h["lr"].max(),
        "param_change_epoch2": second.param_change,
        "test_acc_epoch2_minus_1": second.test_acc - h["test_acc"].iloc[0],
    }


def _one_run_spreads(h: pd.DataFrame) -> dict:
    """With one seed, the spread of each compared number is its run's epoch-to-epoch noise
    over the last epochs (early test accuracy borrows the test accuracy's)."""
    test = late_iqr(h["test_acc"])
    return {
        "test_acc": test,
        "gap": late_iqr(h["train_acc"] - h["test_acc"]),
        "early_test_acc": test,
    }


def training_metrics(history: pd.DataFrame, book: pd.DataFrame) -> list[dict]:
    """Per run and semantics, over its seeds: the median of each seed's numbers, the spread of
    the numbers orderings compare (IQR across seeds, or one run's late-epoch IQR), and (book
    semantics) how far the median test-accuracy curve strays outside the band of the book's
    editions. A run of which any seed diverged has failed metrics, with the reason."""
    rows = []
    for (run, semantics), g in history.groupby(["run", "semantics"], sort=False):
        key, device = f"{run}.{semantics}", g["device"].iloc[0]
        seeds = [h for _, h in g.groupby("seed")]
        per_seed = pd.DataFrame([_run_values(h) for h in seeds])
        values = per_seed.median().to_dict()
        # An exact quirk holds only if it holds for every seed: keep the worst one.
        quirk = per_seed["test_acc_epoch2_minus_1"]
        values["test_acc_epoch2_minus_1"] = quirk.loc[quirk.abs().fillna(math.inf).idxmax()]
        values["param_change_epoch2"] = per_seed["param_change_epoch2"].max(skipna=False)
        one_run = _one_run_spreads(seeds[0])
        values |= {f"{name}_spread": seed_spread(per_seed[name], one_run[name]) for name in one_run}
        values["seeds"] = len(seeds)
        if semantics == "book":
            curve = g.groupby("epoch")["test_acc"].median()
            values["curve_excess"] = reference.band_excess(
                book, BOOK_CURVE_IDS[run], "test_acc", curve.index, curve.values
            )
        if g["diverged"].any():
            at = g[g["diverged"]].iloc[0]
            note = (
                f"{run} ({semantics}) seed {at.seed} diverged at epoch {at.epoch}: train loss"
                f" {at.train_loss:.3g} at lr {at.lr:.3g}"
            )
            rows += [failed(f"{key}.{name}", note, device=device) for name in values]
        else:
            rows += [
                metric(f"{key}.{name}", value, device=device) for name, value in values.items()
            ]
    return rows


def draw_run(h: pd.DataFrame, path, footer: str, book: pd.DataFrame) -> None:
    """The book's animator plot: train loss, train acc and test acc against epoch (medians over
    seeds; with several seeds, the range of test acc as a band), the book's test-accuracy
    curves in grey."""
    fig, ax = plotting.figure()
    columns = ["train_loss", "train_acc", "test_acc"]
    median = h.groupby("epoch")[columns].median()
    seeds = h["seed"].nunique()
    plotting.plot_lines(
        ax,
        median.index,
        [median[c] for c in columns],
        "epoch",
        legend=[
            "train loss",
            "train acc",
            f"test acc (median of {seeds} seeds)" if seeds > 1 else "test acc",
        ],
    )
    if seeds > 1:
        spread = h.groupby("epoch")["test_acc"].agg(["min", "max"])
        ax.fill_between(spread.index, spread["min"], spread["max"], color="C2", alpha=0.2)
    ax.set_xlim(0, h["epoch"].max())
    ax.set_ylim(0, max(1.0, min(h["train_loss"].max(), 2.5)))  # a diverged loss stays in view
    reference.draw(ax, book, BOOK_CURVE_IDS[h["run"].iloc[0]], "test_acc")
    ax.legend(fontsize=6)
    plotting.mark_divergence(ax, h)
    plotting.save(fig, path, footer=footer)


def draw_lrs(history: pd.DataFrame, path) -> None:
    """The learning rate each epoch ran with, as the book's code applies it and as intended."""
    fig, axes = plotting.figure(figsize=(7, 2.5), ncols=2, sharey=True)
    for ax, (semantics, h) in zip(axes, history.groupby("semantics", sort=False)):
        for run, r in h.groupby("run", sort=False):
            r = r[r["seed"] == r["seed"].iloc[0]]  # every seed runs the same lrs
            ax.plot(r["epoch"], r["lr"], label=run)
        ax.set(title=f"{semantics} semantics", xlabel="epoch", ylabel="lr")
        ax.grid(True)
    axes[0].legend(fontsize=6)
    plotting.save(fig, path)


def draw_early(history: pd.DataFrame, path, footer: str) -> None:
    """Test accuracy of the first epochs (median over seeds), cosine with and without
    warm-up."""
    fig, ax = plotting.figure()
    for (run, semantics), h in history[history["run"].isin(["cosine", "warmup"])].groupby(
        ["run", "semantics"]
    ):
        head = h[h["epoch"] <= 2 * EARLY_EPOCHS].groupby("epoch")["test_acc"].median()
        ax.plot(
            head.index,
            head.values,
            "-" if run == "warmup" else "--",
            marker="o" if semantics == "book" else "x",
            label=f"{run} ({semantics})",
        )
    ax.set(xlabel="epoch", ylabel="test acc")
    ax.legend(fontsize=6)
    ax.grid(True)
    plotting.save(fig, path, footer=footer)
