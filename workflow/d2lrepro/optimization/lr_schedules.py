"""Learning-rate scheduling (``lrs.*`` but ``lrs.warmup_high_lr``): the book's schedule plots
and setting the lr by hand (rule ``lr_schedules_plot``); its LeNet trained under each schedule,
as the book's code applies it and as the text intends (``lr_schedules_run``, through
:func:`d2lrepro.core.training.train`); and what the runs measured, with their figures
(``lr_schedules_summary``).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from d2lrepro.core import plotting, provenance, reference
from d2lrepro.core.results import (
    failed,
    late_iqr,
    metric,
    read_metrics,
    run_spread,
    seed_spread,
    write_csv,
    write_metrics,
)
from d2lrepro.optimization import schedulers

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
EARLY_EPOCHS = 5
# The ledger id of each run's curve in the book (the book's code, so "as_written" semantics only).
BOOK_CURVE_IDS = {
    "constant": "lrs.baseline",
    "sqrt": "lrs.sqrt_train",
    "multistep": "lrs.multifactor_train",
    "cosine": "lrs.cosine_train",
    "warmup": "lrs.warmup_train",
}


def schedule_values() -> dict[str, list[float]]:
    """The book's five schedule plots, value for value (30 updates; the factor one 50)."""
    return {
        "sqrt": schedulers.values(schedulers.SquareRootScheduler(lr=0.1), 30),
        "factor": schedulers.values(
            schedulers.FactorScheduler(factor=0.9, stop_factor_lr=1e-2, base_lr=2.0), 50
        ),
        "multistep": schedulers.multistep_plot_values(30),
        "cosine": schedulers.values(
            schedulers.CosineScheduler(max_update=20, base_lr=0.3, final_lr=0.01), 30
        ),
        "warmup": schedulers.values(
            schedulers.CosineScheduler(20, warmup_steps=5, base_lr=0.3, final_lr=0.01), 30
        ),
    }


def set_lr_by_hand(trainer: torch.optim.Optimizer, lr: float) -> None:
    """The book's cell: ``trainer.param_groups[0]["lr"] = lr``."""
    trainer.param_groups[0]["lr"] = lr


def lr_after_setting_by_hand() -> float:
    """The lr SGD steps with once the book has set 0.1 by hand on its lr-0.3 trainer: one step
    on a known gradient, the step divided by the gradient."""
    import torch  # here and in train_run, not at the top: the summary's job needs none

    param = torch.ones(1, dtype=torch.float64, requires_grad=True)
    trainer = torch.optim.SGD([param], lr=0.3)
    set_lr_by_hand(trainer, 0.1)
    gradient = torch.tensor([2.0], dtype=torch.float64)
    param.grad = gradient.clone()
    before = param.detach().clone()
    trainer.step()
    return ((before - param.detach()) / gradient).item()


def schedule_metrics(values: dict[str, list[float]]) -> list[dict]:
    """Every value of the schedule plots, and the lr SGD steps with once set by hand."""
    rows = [metric("set_lr.step_lr", lr_after_setting_by_hand())]
    for name, series in values.items():
        rows += [metric(f"{name}.t{t}", v) for t, v in enumerate(series)]
    return rows


def draw_schedules(values: dict[str, list[float]], figures: dict) -> None:
    """The book's schedule plots: the lr against the update, one figure per schedule."""
    for name, series in values.items():
        fig, ax = plotting.figure()
        plotting.plot_lines(ax, np.arange(len(series)), [series], "update", "learning rate")
        plotting.save(fig, figures[name])


def train_run(
    run: str,
    semantics: str,
    seed: int,
    data_path,
    epochs: int,
    batch_size: int,
    train_subset: int | None,
    test_subset: int | None,
    log: logging.Logger,
) -> pd.DataFrame:
    """The section's LeNet trained under schedule ``run`` as ``semantics`` applies it, from
    seed ``seed``, on this job's device (its GPU, else the CPU): one row per epoch
    (:data:`~d2lrepro.core.training.COLUMNS`), labelled with the run, the device and torch's
    threads."""
    import torch

    from d2lrepro.core.data import load_data
    from d2lrepro.core.devices import device_for
    from d2lrepro.core.models import lenet
    from d2lrepro.core.training import train

    device = device_for(0, 1)
    threads = torch.get_num_threads()
    log.info(
        "%s (%s semantics, seed %d) on %s with %d threads", run, semantics, seed, device, threads
    )
    fashion = load_data(data_path, train_subset, test_subset, device)
    history = train(
        lenet(seed=seed),
        fashion,
        epochs,
        schedulers.schedule(run, semantics),
        batch_size=batch_size,
        device=device,
        seed=seed,
        log=log,
    )
    return history.assign(
        run=run, semantics=semantics, seed=seed, device=str(device), threads=threads
    )


# The units of the numbers of a run that are not pure numbers.
UNITS = {"samples_per_s": "samples/s"} | dict.fromkeys(
    ("curve_excess", "curve_excess_nearest_seed"), "|Δ|"
)


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
    over the last epochs (early test accuracy and the late gain of test accuracy borrow the test
    accuracy's)."""
    test = late_iqr(h["test_acc"])
    return {
        "test_acc": test,
        "gap": late_iqr(h["train_acc"] - h["test_acc"]),
        "early_test_acc": test,
        "late_test_gain": test,
    }


def training_metrics(history: pd.DataFrame, book: pd.DataFrame) -> list[dict]:
    """Per run and semantics, over its seeds: the median of each seed's numbers, the spread of
    the numbers orderings compare (IQR across seeds, or one run's late-epoch IQR), and (book
    semantics) how far the band of the book's editions' test-accuracy curves lies from the
    seeds' (:func:`~d2lrepro.core.reference.seeds_excess`). A run of which any seed diverged
    has failed metrics, with the reason."""
    rows = []
    for (run, semantics), g in history.groupby(["run", "semantics"], sort=False):
        key, device = f"{run}.{semantics}", provenance.devices_of(g)
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
        if semantics == "as_written":
            values |= reference.seeds_excess(book, BOOK_CURVE_IDS[run], "test_acc", g, "test_acc")
            # The book's least noisy number, a mean over the last epoch's examples, judged as
            # one typical run against the seeds' final train losses (their quartiles, extremes).
            values |= run_spread("train_loss", per_seed["train_loss"])
        if g["diverged"].any():
            at = g[g["diverged"]].iloc[0]
            note = (
                f"{run} ({semantics}) seed {at.seed} diverged at epoch {at.epoch}: train loss"
                f" {at.train_loss:.3g} at lr {at.lr:.3g}"
            )
            rows += [failed(f"{key}.{name}", note, UNITS.get(name, ""), device) for name in values]
        else:
            rows += [
                metric(f"{key}.{name}", value, UNITS.get(name, ""), device)
                for name, value in values.items()
            ]
    return rows


def summarize(
    run_files: list,
    schedule_plots_file,
    records: dict[str, dict],
    book: pd.DataFrame,
    history_out,
    metrics_out,
    figure_paths: dict,
    scaled: list = (),
) -> None:
    """The runs' histories (``run_files``) as one table (``history_out``); the experiment's
    metrics (``metrics_out``): the schedule plots' (``schedule_plots_file``, the rows of rule
    ``lr_schedules_plot``) and the runs' (:func:`training_metrics`); and the runs' figures
    (``figure_paths``), each footer naming the machines of its runs (``records``) and what the
    preset scaled (``scaled``)."""
    history = pd.concat([pd.read_csv(path) for path in run_files], ignore_index=True)
    for (run, semantics, seed), h in history.groupby(["run", "semantics", "seed"], sort=False):
        log.info(
            "LeNet %s (%s, seed %d): %.0f samples/s median over %d epochs on %s with %d threads",
            run,
            semantics,
            seed,
            h["samples_per_s"].median(),
            len(h),
            h["device"].iloc[0],
            h["threads"].iloc[0],
        )
    write_csv(history, history_out)
    # The plot job's rows as it wrote them; the runs' rows name the machines of the runs, not
    # every machine this summary read.
    plots = read_metrics(schedule_plots_file)
    trained = [
        r | {"machine": provenance.of_frame(history)} for r in training_metrics(history, book)
    ]
    write_metrics(plots.to_dict("records") + trained, metrics_out)
    footer = provenance.footer(records, history, where="the lr-schedule runs")
    draw_lrs(history, figure_paths["lrs"], footer, scaled)
    draw_early(history, figure_paths["early"], footer, scaled)
    for run, h in history[history["semantics"] == "as_written"].groupby("run"):
        footer = provenance.footer(records, h, where="the lr-schedule runs")
        draw_run(h, figure_paths[run], footer, book, scaled)


# Each semantics of a run (:data:`~d2lrepro.optimization.schedulers.SEMANTICS`) in words.
SEMANTICS_WORDS = {"as_written": "as the book's code applies it", "intended": "as intended"}
# The line styles of the runs in turn, so that runs with the same lrs stay visible.
LINE_STYLES = ("-", "--", "-.", ":")


def draw_run(h: pd.DataFrame, path, footer: str, book: pd.DataFrame, scaled: list = ()) -> None:
    """The book's animator plot: train loss, train acc and test acc against epoch (medians over
    seeds; with several seeds, the range of test acc and, darker, its middle half as bands),
    the book's test-accuracy curves in grey; what the preset scaled (``scaled``) said in the
    panel and under it (:func:`~d2lrepro.core.plotting.mark_scaled`)."""
    fig, ax = plotting.figure()
    columns = ["train_loss", "train_acc", "test_acc"]
    median = h.groupby("epoch")[columns].median()
    seeds = h["seed"].nunique()
    test_acc = f"test acc (median of {seeds} seeds)" if seeds > 1 else "test acc"
    lines = [median[c] for c in columns]
    legend = ["train loss", "train acc", test_acc]
    plotting.plot_lines(ax, median.index, lines, "epoch", "loss, accuracy", legend=legend)
    if seeds > 1:
        by_epoch = h.groupby("epoch")["test_acc"]
        middle = reference.middle_half(h, "test_acc")  # what the curve claims judge
        for (low, high), alpha, what in (
            ((by_epoch.min(), by_epoch.max()), 0.2, "its range"),
            (middle, 0.35, "its middle half"),
        ):
            ax.fill_between(low.index, low, high, color="C2", alpha=alpha, lw=0, label=what)
    ax.set_xlim(0, h["epoch"].max())
    ax.set_ylim(0, max(1.0, min(h["train_loss"].max(), 2.5)))  # a diverged loss stays in view
    reference.draw(ax, book, BOOK_CURVE_IDS[h["run"].iloc[0]], "test_acc", "test acc")
    plotting.legend_readable(ax)
    plotting.mark_divergence(ax, h)
    plotting.note(fig, plotting.mark_scaled(ax, scaled))
    plotting.save(fig, path, footer=footer)


def draw_lrs(history: pd.DataFrame, path, footer: str, scaled: list = ()) -> None:
    """The learning rate of each epoch, as the book's code applies it and as intended (a panel
    per semantics), each run in one colour and style in every panel and one legend of them
    all; what the preset scaled (``scaled``) said in the first panel and under them."""
    runs = list(dict.fromkeys(history["run"]))
    by_semantics = history.groupby("semantics", sort=False)
    n = len(by_semantics)
    fig, axes = plotting.figure(figsize=(3.5 * n, 2.5), ncols=n, sharey=True, squeeze=False)
    for ax, (semantics, h) in zip(axes[0], by_semantics):
        for run, r in h.groupby("run", sort=False):
            r = r[r["seed"] == r["seed"].iloc[0]]  # every seed runs the same lrs
            i = runs.index(run)
            style = LINE_STYLES[i % len(LINE_STYLES)]
            ax.plot(r["epoch"], r["lr"], style, color=f"C{i}", label=run)
        ax.set(title=SEMANTICS_WORDS.get(semantics, semantics), xlabel="epoch")
        ax.grid(True)
    axes[0, 0].set_ylabel("learning rate")
    legend = {label: line for ax in axes[0] for line, label in zip(*ax.get_legend_handles_labels())}
    plotting.legend_readable(
        axes[0, -1],
        handles=[legend[run] for run in runs],
        loc="upper left",
        bbox_to_anchor=(1.02, 1),
    )
    plotting.note(fig, plotting.mark_scaled(axes[0, 0], scaled))
    plotting.save(fig, path, footer=footer)


def draw_early(history: pd.DataFrame, path, footer: str, scaled: list = ()) -> None:
    """Test accuracy of the first epochs (median over seeds), cosine with and without
    warm-up; what the preset scaled (``scaled``) said in the panel and under it."""
    fig, ax = plotting.figure()
    early = history[history["run"].isin(["cosine", "warmup"])]
    for (run, semantics), h in early.groupby(["run", "semantics"]):
        head = h[h["epoch"] <= 2 * EARLY_EPOCHS].groupby("epoch")["test_acc"].median()
        style, marker = "-" if run == "warmup" else "--", "o" if semantics == "as_written" else "x"
        label = f"{run} ({SEMANTICS_WORDS.get(semantics, semantics)})"
        ax.plot(head.index, head.values, style, marker=marker, label=label)
    ax.set(xlabel="epoch", ylabel="test accuracy (fraction)")
    plotting.legend_readable(ax)
    ax.grid(True)
    plotting.note(fig, plotting.mark_scaled(ax, scaled))
    plotting.save(fig, path, footer=footer)
