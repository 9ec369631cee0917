"""The figures of the multi-device sections: the training runs' curves beside the book's
(``mgpu.*``, ``mgpuc.*``), the cost model of a data-parallel step (``mgpu.cost_model``), the
parameter servers' strategies (``ps.*``), the runs' throughput and the top-k logs
(``mgpuc.*``)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from d2lrepro.core import plotting, reference
from d2lrepro.multidevice.parts.run_results import SINGLE_PROCESS

# Each step of the cost model (config key cost_model) in words, and each of its lines.
COST_STEPS = {
    "lenet": "LeNet from scratch",
    "lenet_ddp": "LeNet through DDP",
    "resnet18": "ResNet-18 through DDP",
}
COST_LINES = {
    "t1": "t1: gradient on one device",
    "t2": "t2: communication",
    "max_t1_t2": "max(t1, t2)",
    "t1_plus_t2": "t1 + t2",
    "measured_step": "measured step",
}


def draw_cost(costs: dict[str, pd.DataFrame], path, footer: str) -> None:
    """t1, t2, max(t1, t2), t1 + t2 and the measured step against the per-device batch, one
    panel per step of the cost model, one legend beside them; a step not measured here says
    why in its panel."""
    fig, axes = plotting.figure(figsize=(3.3 * len(costs) + 1.5, 2.8), ncols=len(costs))
    axes = np.atleast_1d(axes)
    for ax, (model, cost) in zip(axes, costs.items()):
        title = COST_STEPS.get(model, model)
        ax.set(title=title, xlabel="batch per device (examples)", ylabel="time (s)")
        if "t1" not in cost or cost["t1"].isna().all():
            notes = cost["note"].dropna() if "note" in cost else []
            why = notes.iloc[0] if len(notes) else "its table holds no timing"
            plotting.no_data(ax, f"Not measured here: {why}.")
            continue
        lines = cost.assign(t1_plus_t2=cost["t1"] + cost["t2"])
        for (column, label), fmt in zip(COST_LINES.items(), ["-o", "-s", "k:", "k--", "r-^"]):
            ax.plot(lines["batch_per_device"], lines[column], fmt, markersize=3, label=label)
        ax.set(xscale="log", yscale="log")
        ax.grid(True)
    drawn = [ax for ax in axes if ax.lines]
    if drawn:  # every panel draws the same five lines
        handles, _ = drawn[0].get_legend_handles_labels()
        plotting.legend_readable(
            axes[-1], handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1)
        )
    plotting.save(fig, path, footer=footer)


# The book's times for 160 MB of gradients on its 4-GPU PCIe server (seconds).
BOOK_SYNC_S = {"gather": 0.060, "host": 0.080, "ring": 0.015}


def draw_param_server(rows: pd.DataFrame, path, footer: str) -> None:
    """Left: seconds to synchronize the gradient by each strategy on 2 workers and on all the
    devices (median, error bars over the IQR), beside the book's times. Right: the time to
    push every worker's gradient to one server and a 1/n share to each of n servers (the
    slowest worker's), beside one server's time divided by n (the book's O(m/n)). A run that
    could not happen here says why: in the right panel where none could, else in a note."""
    value = rows.set_index("metric")["value"].astype(float)
    notes = rows.set_index("metric")["note"].fillna("")

    def get(name):
        return value.get(name, math.nan)

    runs = [(p, int(n)) for p in ("ps", "ps.all") if (n := get(f"{p}.workers")) > 0]
    fig, (sync, pushes) = plotting.figure(figsize=(7.5, 3), ncols=2)
    pt = plotting.readable_pt(fig)
    for ax in (sync, pushes):
        ax.set(ylabel="seconds")
    names, width = list(BOOK_SYNC_S), 0.8 / max(len(runs), 1)
    for i, (prefix, workers) in enumerate(runs):
        label = f"{workers} workers"
        x = np.arange(len(names)) + (i - (len(runs) - 1) / 2) * width
        medians = [get(f"{prefix}.{n}.median_s") for n in names]
        spreads = [get(f"{prefix}.{n}.iqr_s") / 2 for n in names]
        sync.bar(x, medians, width, yerr=spreads, color=f"C{i}", label=label)
        for xi, median in zip(x, medians):
            if not math.isfinite(median):
                sync.text(xi, 0, "n/a", ha="center", va="bottom", fontsize=pt)
        parts = ("push.n1", "push.split")
        pushes.errorbar(
            [1, workers],
            [get(f"{prefix}.{n}.median_s") for n in parts],
            yerr=[get(f"{prefix}.{n}.iqr_s") / 2 for n in parts],
            fmt="o-",
            color=f"C{i}",
            label=f"run on {label}",
        )
    if runs:
        servers = np.arange(1, max(n for _, n in runs) + 1)
        one = get(f"{runs[0][0]}.push.n1.median_s")
        pushes.plot(servers, one / servers, "k:", label="1 server's time / n")
        pushes.set_xticks(servers)
    sync.scatter(
        range(len(names)),
        list(BOOK_SYNC_S.values()),
        color=plotting.BOOK_GREY,
        marker="_",
        s=400,
        zorder=3,
        label="book, 160 MB on 4 GPUs",
    )
    sync.set_xticks(range(len(names)), names)
    sync.set_xlabel("strategy")
    pushes.set_xlabel("servers (n)")
    sync.set_xlim(-0.5, len(names) - 0.5)
    where = {"ps": "2 workers", "ps.all": "all devices"}
    missing = " ".join(
        f"Not run here on {where[p]}: {notes.get(f'{p}.workers')}."
        for p in where
        if p not in dict(runs)
    )
    if missing and not runs:
        plotting.no_data(pushes, missing)
    elif missing:
        plotting.note(fig, missing)
    for ax in (sync, pushes):
        ax.grid(True, axis="y")
        if ax.get_legend_handles_labels()[0]:
            ax.margins(y=0.5)  # room for the legend above the bars and the book's marks
            plotting.legend_readable(ax, loc="upper left")
    sync.set_title("synchronize the gradient", fontsize=8)
    pushes.set_title("push the gradients to n servers", fontsize=8)
    plotting.save(fig, path, footer=footer)


def draw_throughput(
    values: dict[str, float], runs: list[str], path, footer: str, scaled: list = ()
) -> None:
    """Samples per second of each run made on this machine (log scale: the models differ
    ~100x); what the preset scaled (``scaled``) said in the panel and under it
    (:func:`~d2lrepro.core.plotting.mark_scaled`)."""
    rates = {r: values.get(f"{r}.samples_per_s", math.nan) for r in runs}
    rates = {r: v for r, v in rates.items() if math.isfinite(v)}
    fig, ax = plotting.figure(figsize=(4.5, 2.5))
    ax.bar(range(len(rates)), list(rates.values()), color=[f"C{i}" for i in range(len(rates))])
    ax.set_xticks(range(len(rates)), list(rates), rotation=20, ha="right")
    ax.set(yscale="log", xlabel="run", ylabel="samples / s", title="Training throughput")
    ax.grid(True, axis="y")
    plotting.note(fig, plotting.mark_scaled(ax, scaled))
    plotting.save(fig, path, footer=footer)


def draw_topk(
    topk: dict[str, pd.DataFrame], path, footer: str, missing: str = "", scaled: list = ()
) -> None:
    """The runs that log it (the seeds' Paddle run on 1 and 2 devices): running train loss,
    top-1 and top-5 training accuracy at each logging step; ``missing`` (:func:`not_run`)
    names those that could not run here, ``scaled`` what the preset scaled (said in the first
    panel and under them)."""
    fig, axes = plotting.figure(figsize=(7, 2.8), ncols=2)
    for i, (name, rows) in enumerate(topk.items()):
        step = np.arange(1, len(rows) + 1)
        axes[0].plot(step, rows["train_loss"], ".-", color=f"C{i}", label=name)
        axes[1].plot(step, rows["top1"], ".-", color=f"C{i}", label=f"{name} top-1")
        axes[1].plot(step, rows["top5"], ".--", color=f"C{i}", label=f"{name} top-5")
    axes[0].set(xlabel="logging step", ylabel="train loss")
    axes[1].set(xlabel="logging step", ylabel="train accuracy")
    for ax in axes:
        ax.grid(True)
        if ax.lines:
            plotting.legend_readable(ax)
    plotting.note(fig, missing, plotting.mark_scaled(axes[0], scaled))
    plotting.save(fig, path, footer=footer)


def _trained(histories: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The runs that trained on this machine (not the ones it could not make)."""
    return {
        name: h for name, h in histories.items() if "test_acc" in h and h["test_acc"].notna().any()
    }


def not_run(histories: dict[str, pd.DataFrame]) -> str:
    """A figure's note naming the runs of ``histories`` that could not be made here, with
    their reasons, as its legend names runs (devices, and the run or how it ran); "" if none."""
    reasons: dict[str, list[str]] = {}
    for name, h in histories.items():
        if name not in _trained(histories):
            devices, how = name.rsplit(".", 1)[-1], name
            if name.startswith(SINGLE_PROCESS):
                how = "one process, book's code"
            why = h["note"].dropna().iloc[0] if "note" in h and h["note"].notna().any() else ""
            reasons.setdefault(why or "no epoch trained", []).append(f"{devices} dev ({how})")
    return " ".join(f"Not run here: {', '.join(names)}: {why}." for why, names in reasons.items())


# The line style of the book's curve of a run on 1 and on 2 devices.
BOOK_DEVICE_STYLES = {"1": ":", "2": "--"}


def draw_test_acc(
    histories: dict[str, pd.DataFrame],
    label: Callable[[str, pd.DataFrame], str],
    path,
    footer: str,
    book: pd.DataFrame,
    curve_ids: dict[str, str],
    scaled: list = (),
) -> None:
    """Test accuracy per epoch (median over seeds), one line per run that could be made on
    this machine (``label(name, history)``: a run in words), the book's curves of the same
    runs (``curve_ids``: run -> its id in ``book``) in grey, a line style per device count,
    and a note naming the runs not made here; what the preset scaled (``scaled``) said in the
    panel and in the note; the legend beside the axes, where it hides no curve."""
    fig, ax = plotting.figure(figsize=(8, 2.8))
    for name in histories:
        if name in curve_ids:
            devices = name.split(".")[-1]
            what = f"{devices} device{'s' if devices != '1' else ''}"
            style = BOOK_DEVICE_STYLES.get(devices, "-.")
            reference.draw(ax, book, curve_ids[name], "test_acc", what, linestyle=style)
    for name, h in _trained(histories).items():
        curve = h.groupby("epoch")["test_acc"].median()
        ax.plot(curve.index, curve.values, "-o", markersize=3, label=label(name, h))
    ax.set(xlabel="epoch", ylabel="test acc")
    plotting.legend_readable(ax, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(True)
    plotting.note(fig, not_run(histories), plotting.mark_scaled(ax, scaled))
    plotting.save(fig, path, footer=footer)


def draw_epochs(
    histories: dict[str, pd.DataFrame],
    label: Callable[[str, pd.DataFrame], str],
    path,
    footer: str,
    scaled: list = (),
) -> None:
    """Train loss, train accuracy and test accuracy per epoch (medians over seeds) of every
    run that could be made on this machine, one panel each, the legend beside them, and a note
    naming the runs not made here; what the preset scaled (``scaled``) said in the first panel
    and in the note."""
    columns = ("train_loss", "train_acc", "test_acc")
    fig, axes = plotting.figure(figsize=(11, 2.8), ncols=len(columns))
    for name, h in _trained(histories).items():
        curves = h.groupby("epoch")[list(columns)].median()
        for ax, column in zip(axes, columns):
            ax.plot(curves.index, curves[column], "-o", markersize=2, label=label(name, h))
    for ax, column in zip(axes, columns):
        ax.set(xlabel="epoch", ylabel=column.replace("_", " "))
        ax.grid(True)
    if axes[-1].lines:
        plotting.legend_readable(axes[-1], loc="upper left", bbox_to_anchor=(1.01, 1))
    plotting.note(fig, not_run(histories), plotting.mark_scaled(axes[0], scaled))
    plotting.save(fig, path, footer=footer)
