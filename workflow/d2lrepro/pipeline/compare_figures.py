"""The comparison's figures: every run's curves on the same axes beside the book's, and the
ratios each run measured, one figure per section; PNGs embedded in the page."""

from __future__ import annotations

import base64
import importlib
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import ticker

from d2lrepro.core import paths, plotting, reference
from d2lrepro.pipeline.archive import Run

PANEL = (2.4, 1.8)  # inches per panel of a grid of curves
COLUMNS = 4
RATIO_KINDS = ("ratio_above", "ratio_below")
# Line styles of the runs, so that runs that measured the same curve stay apart.
STYLES = ("-", "--", ":", "-.")


def is_ratio(check: dict) -> bool:
    """Whether a check compares a ratio with its bound: a ratio of two measurements, a sum of
    parts over the whole, or a metric that is a speed-up or an x_over_y."""
    metric = str(check.get("metric", ""))
    return check.get("kind") in (*RATIO_KINDS, "sum_of_parts") or (
        check.get("kind") in ("above", "below") and ("speedup" in metric or "_over_" in metric)
    )


def plain(text) -> str:
    """``text`` as matplotlib draws it literally: a pair of $ would start mathtext."""
    return str(text).replace("$", r"\$")


def median_curves(frame: pd.DataFrame, key: str, y: str) -> dict[str, pd.Series]:
    """``key`` -> the median over seeds of ``y`` per epoch."""
    frame = frame.assign(
        epoch=pd.to_numeric(frame["epoch"], errors="coerce"),
        value=pd.to_numeric(frame[y], errors="coerce"),
    ).dropna(subset=["epoch", "value"])
    return {str(k): g.groupby("epoch")["value"].median() for k, g in frame.groupby(key)}


def families(ledger: dict) -> list[dict]:
    """The families of curves a comparison draws, in ledger order: each section's
    ``compared_curves``."""
    return [s["compared_curves"] for s in ledger["sections"] if "compared_curves" in s]


def curve_ids(family: dict) -> dict[str, str]:
    """The book's curve id of each run name of ``family`` (its ``curve_ids``, the dotted
    name of the experiment's mapping), none where the names are the ids."""
    module, _, name = family.get("curve_ids", "").rpartition(".")
    return getattr(importlib.import_module(module), name) if module else {}


def read(run: Run, family: dict) -> dict[str, pd.Series]:
    """The curves of ``family`` that ``run`` holds, by the book's curve id: the median over
    seeds per epoch of its ``y``, from its ``table`` (rows as ``where`` says, a curve per
    value of ``curve``) or from its ``run_files`` (one per run and seed:
    :func:`d2lrepro.core.paths.run_file`; the folder's other files draw nothing)."""
    if "table" in family:
        frame = run.table(family["table"])
        if frame is None:
            return {}
        for column, value in family.get("where", {}).items():
            frame = frame[frame[column] == value]
        key = family["curve"]
    else:
        frames = []
        for member in run.files:
            if Path(member).parent != Path(family["run_files"]):
                continue
            try:
                name, _ = paths.run_of(member)
            except ValueError:  # the experiment's other files: metrics, top-k logs, machines
                continue
            frames.append(run.table(member).assign(run=name))
        if not frames:
            return {}
        frame, key = pd.concat(frames, ignore_index=True), "run"
    ids = curve_ids(family)
    curves = median_curves(frame, key, family["y"])
    return {ids.get(name, name): curve for name, curve in curves.items()}


def png(fig) -> str:
    return "data:image/png;base64," + base64.b64encode(plotting.png(fig)).decode("ascii")


def _book_limits(book: pd.DataFrame, curve_id: str, metric: str):
    """The y range of the book's curve with room around it, as the book's plots frame it."""
    values = reference.curve(book, curve_id, metric)["value"]
    if values.empty:
        return None
    pad = max(values.max() - values.min(), 0.05 * abs(values.max()), 1e-3)
    return values.min() - pad, values.max() + pad


def curves(runs: list[Run], names: list[str], book: pd.DataFrame, drawn: list[dict]) -> list[dict]:
    """One figure per family of curves (``drawn``: :func:`families`) that some run holds: a
    panel per curve, each run in its colour, the book's editions in grey."""
    figures = []
    for family in drawn:
        metric, ylabel, ylim = family["metric"], family["ylabel"], family.get("ylim")
        per_run = []
        for run in runs:
            try:
                per_run.append(read(run, family))
            except (KeyError, ValueError, TypeError):  # a table of another shape: not drawn
                per_run.append({})
        ids = list(dict.fromkeys(i for found in per_run for i in found))
        if not ids:
            continue
        cols = min(COLUMNS, len(ids))
        rows = math.ceil(len(ids) / cols)
        fig, axes = plotting.figure(
            figsize=(PANEL[0] * cols, PANEL[1] * rows + 0.5), nrows=rows, ncols=cols, squeeze=False
        )
        for ax, curve_id in zip(axes.flat, ids):
            reference.draw(ax, book, curve_id, metric)
            for i, found in enumerate(per_run):
                if curve_id in found:
                    c = found[curve_id]
                    ax.plot(
                        c.index,
                        c.values,
                        STYLES[i % len(STYLES)],
                        color=f"C{i}",
                        marker="o",
                        markersize=2,
                        linewidth=1.2,
                        label=plain(names[i]),
                    )
            ax.set_title(plain(curve_id), fontsize=7)
            ax.set_ylim(ylim or _book_limits(book, curve_id, metric) or ax.get_ylim())
            ax.set_xlabel("epoch", fontsize=6)
            ax.set_ylabel(ylabel, fontsize=6)
            ax.tick_params(labelsize=6)
            ax.grid(True)
        for ax in axes.flat[len(ids) :]:
            ax.set_visible(False)
        legend = {}
        for ax in axes.flat[: len(ids)]:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                legend.setdefault(label, handle)
        fig.legend(legend.values(), legend.keys(), loc="upper center", ncols=4, fontsize=6)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
        figures.append({"title": family["title"], "src": png(fig)})
    return figures


def ratios(
    rows: pd.DataFrame, numbers: list[dict], names: list[str], titles: dict[str, str]
) -> list[dict]:
    """One figure per section with measured ratio claims: each claim's ratio in every run, a
    dot per run, and the bound the claim sets, a black bar (on a log scale where they lie an
    order of magnitude apart)."""
    measured = rows[rows["kind"] == "measurement"]
    figures = []
    for section, claims in measured.groupby("section", sort=False):
        shown = []
        for claim_id in claims["id"]:
            found = [n.get(claim_id, (math.nan, {})) for n in numbers]
            values = [v if is_ratio(c) else math.nan for v, c in found]
            bounds = [c.get("bound", 1) for _, c in found if is_ratio(c)]
            if any(math.isfinite(v) and v > 0 for v in values):
                shown.append((claim_id, values, bounds[0]))
        if not shown:
            continue
        fig, ax = plotting.figure(figsize=(6.5, 0.9 + 0.28 * len(shown)))
        offsets = np.linspace(-0.2, 0.2, len(names)) if len(names) > 1 else [0.0]
        for j, (_, values, bound) in enumerate(shown):
            if isinstance(bound, int | float) and bound > 0:
                ax.plot(
                    [bound] * 2,
                    [j - 0.4, j + 0.4],
                    color="black",
                    linewidth=1.5,
                    label="the claim's bound" if j == 0 else None,
                )
            for i, value in enumerate(values):
                if math.isfinite(value) and value > 0:
                    ax.plot(
                        value,
                        j + offsets[i],
                        "o",
                        color=f"C{i}",
                        markersize=4,
                        label=plain(names[i]) if j == 0 else None,
                    )
        drawn = [v for _, vs, b in shown for v in [*vs, b] if isinstance(v, int | float) and v > 0]
        if max(drawn) / min(drawn) > 10:  # ratios an order of magnitude apart: log scale
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_yticks(np.arange(len(shown)), [plain(c) for c, _, _ in shown], fontsize=6)
        ax.set_ylim(len(shown) - 0.5, -0.5)
        ax.set_xlabel("measured ratio")
        ax.grid(True, axis="x")
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles, labels, fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1))
        fig.tight_layout()
        figures.append({"title": f"{titles.get(section, section)}: ratios", "src": png(fig)})
    return figures
