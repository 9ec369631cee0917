"""Learning-rate scheduling: the book's schedule plots and LeNet trained under each schedule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from . import plotting, schedules
from .results import metric

RUNS = tuple(schedules.EXPERIMENTS)  # constant, sqrt, multistep, cosine, warmup
EARLY_EPOCHS = 5


def plot_values() -> dict[str, list[float]]:
    """The book's five schedule plots, value for value (30 updates; the factor one 50)."""
    return {
        "sqrt": schedules.values(schedules.SquareRootScheduler(lr=0.1), 30),
        "factor": schedules.values(schedules.FactorScheduler(factor=0.9, stop_factor_lr=1e-2, base_lr=2.0), 50),
        "multistep": schedules.multistep_plot_values(30),
        "cosine": schedules.values(schedules.CosineScheduler(max_update=20, base_lr=0.3, final_lr=0.01), 30),
        "warmup": schedules.values(
            schedules.CosineScheduler(20, warmup_steps=5, base_lr=0.3, final_lr=0.01), 30),
    }


def set_lr_by_hand() -> float:
    """The book's `trainer.param_groups[0]['lr'] = 0.1`, read back from the optimizer."""
    trainer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.3)
    trainer.param_groups[0]["lr"] = 0.1
    return trainer.param_groups[0]["lr"]


def plot_metrics(values: dict[str, list[float]]) -> list[dict]:
    rows = [metric("set_lr.lr", set_lr_by_hand())]
    for name, series in values.items():
        rows += [metric(f"{name}.t{t}", v) for t, v in enumerate(series)]
    return rows


def draw_plots(values: dict[str, list[float]], figures: dict) -> None:
    for name, series in values.items():
        fig, ax = plotting.figure()
        plotting.plot_lines(ax, np.arange(len(series)), [series])
        plotting.save(fig, figures[name])


def lrs_per_epoch(run: str, epochs: int, semantics: str) -> list[float]:
    return schedules.epoch_lrs(run, epochs, semantics)


def training_metrics(history: pd.DataFrame) -> list[dict]:
    """Per run and semantics: final accuracies, the train-test gap and early test accuracy."""
    rows = []
    for (run, semantics), h in history.groupby(["run", "semantics"], sort=False):
        key, last, device = f"{run}.{semantics}", h.iloc[-1], h["device"].iloc[0]
        values = {
            "train_loss": last.train_loss,
            "train_acc": last.train_acc,
            "test_acc": last.test_acc,
            "gap": last.train_acc - last.test_acc,
            "early_test_acc": h["test_acc"].head(EARLY_EPOCHS).mean(),
            "samples_per_s": h["samples_per_s"].median(),
        }
        # A diverged run has no accuracy to compare: its claims say so rather than fail.
        note = "the run diverged" if h["diverged"].any() else ""
        rows += [metric(f"{key}.{name}", float("nan") if note else value, device=device, note=note)
                 for name, value in values.items()]
    return rows


def draw_run(h: pd.DataFrame, path, footer: str) -> None:
    """The book's animator plot: train loss, train acc and test acc against epoch."""
    fig, ax = plotting.figure()
    plotting.plot_lines(ax, h["epoch"], [h["train_loss"], h["train_acc"], h["test_acc"]], "epoch",
                        legend=["train loss", "train acc", "test acc"])
    ax.set_xlim(0, h["epoch"].max())
    plotting.save(fig, path, footer=footer)


def draw_lrs(history: pd.DataFrame, path) -> None:
    """The learning rate each epoch ran with, as the book's code applies it and as intended."""
    fig, axes = plotting.figure(figsize=(7, 2.5), ncols=2, sharey=True)
    for ax, (semantics, h) in zip(axes, history.groupby("semantics", sort=False)):
        for run, r in h.groupby("run", sort=False):
            ax.plot(r["epoch"], r["lr"], label=run)
        ax.set(title=f"{semantics} semantics", xlabel="epoch", ylabel="lr")
        ax.grid(True)
    axes[0].legend(fontsize=6)
    plotting.save(fig, path)


def draw_early(history: pd.DataFrame, path, footer: str) -> None:
    """Test accuracy of the first epochs, cosine with and without warm-up."""
    fig, ax = plotting.figure()
    for (run, semantics), h in history[history["run"].isin(["cosine", "warmup"])].groupby(["run", "semantics"]):
        head = h.head(2 * EARLY_EPOCHS)
        ax.plot(head["epoch"], head["test_acc"], "-" if run == "warmup" else "--",
                marker="o" if semantics == "book" else "x", label=f"{run} ({semantics})")
    ax.set(xlabel="epoch", ylabel="test acc")
    ax.legend(fontsize=6)
    ax.grid(True)
    plotting.save(fig, path, footer=footer)
