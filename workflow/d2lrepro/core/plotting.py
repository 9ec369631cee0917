"""Figures in the book's style: d2l's 3.5x2.5 in axes and line formats, saved as PNG."""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

BOOK_FIGSIZE = (3.5, 2.5)
BOOK_FORMATS = ("-", "m--", "g-.", "r:")
DPI = 150
# The footer's font size (points), and its widest characters' mean width (in ems) with margin.
FOOTER_PT = 5.5
FOOTER_CHAR_EM = 0.55


@functools.cache
def seaborn():
    """seaborn, with matplotlib drawing to files and the book's look set; imported on first
    use, so that jobs that draw nothing start half a second sooner."""
    import matplotlib

    matplotlib.use("Agg")
    import seaborn as sns

    # matplotlib's tab10 colours, as in the book; color_codes off so 'm--' stays magenta.
    sns.set_theme(
        context="paper", style="ticks", palette="tab10", font_scale=0.9, color_codes=False
    )
    return sns


def pyplot():
    """matplotlib.pyplot in the book's style (see :func:`seaborn`)."""
    seaborn()
    import matplotlib.pyplot as plt

    return plt


def figure(figsize=BOOK_FIGSIZE, **kwargs):
    return pyplot().subplots(figsize=figsize, **kwargs)


def plot_lines(ax, x, ys, xlabel=None, ylabel=None, legend=None, fmts=BOOK_FORMATS):
    """d2l.plot: one line per y with the book's formats (blue solid, magenta dashed, ...),
    labelled by ``legend``."""
    labels = legend or [None] * len(ys)
    for y, fmt, label in zip(ys, fmts * (len(ys) // len(fmts) + 1), labels):
        ax.plot(x, y, fmt, label=label)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if legend:
        ax.legend()
    ax.grid(True)


def annotate(ax, text, xy, xytext):
    # An explicit colour: seaborn's theme draws patches, arrows included, with white edges.
    ax.annotate(text, xy=xy, xytext=xytext, arrowprops=dict(arrowstyle="->", color="black"))


def metric_table(metrics: pd.DataFrame, pattern: str) -> pd.DataFrame:
    """The metrics whose names match ``pattern``, its groups as columns beside ``value``."""
    parts = metrics["metric"].str.extract(pattern)
    keep = parts.notna().all(axis=1)
    return parts[keep].assign(value=metrics.loc[keep, "value"].astype(float))


def grouped_bars(ax, table: pd.DataFrame, groups: list, bars: list) -> None:
    """Bars of ``table``'s median_s per (group, bar), grouped along x, with error bars spanning
    iqr_s and, where the table has naive_s, hollow markers for it."""
    width = 0.8 / len(bars)
    for j, bar in enumerate(bars):
        x = np.arange(len(groups)) + (j - (len(bars) - 1) / 2) * width
        rows = table.reindex([(g, bar) for g in groups])
        ax.bar(
            x,
            rows["median_s"],
            width,
            yerr=rows["iqr_s"].fillna(0) / 2,
            color=f"C{j}",
            label=bar,
            capsize=2,
            error_kw={"elinewidth": 0.8},
        )
        if "naive_s" in rows:
            ax.scatter(x, rows["naive_s"], facecolors="none", edgecolors=f"C{j}", s=18, zorder=3)
    ax.set_xticks(np.arange(len(groups)))


def mark_divergence(ax, history: pd.DataFrame, x: str = "epoch") -> None:
    """A red line and label where ``history`` first has ``diverged`` True, if it has."""
    if "diverged" in history and history["diverged"].astype(bool).any():
        at = history.loc[history["diverged"].astype(bool), x].iloc[0]
        ax.axvline(at, color="red", linewidth=1)
        ax.text(at, 0.5, " diverged", color="red", transform=ax.get_xaxis_transform(), fontsize=7)


def footer_lines(footer: str, width_in: float) -> list[str]:
    """``footer`` as the lines it takes on a figure ``width_in`` inches wide: each of its
    "; "-separated parts (a machine) on lines of its own, wrapped to the width."""
    chars = int(width_in * 72 / (FOOTER_PT * FOOTER_CHAR_EM))
    return [line for part in footer.split("; ") for line in textwrap.wrap(part, chars)]


def save(fig, path: Path, footer: str | None = None) -> None:
    """Save as PNG; ``footer`` (the machines and devices that measured the data drawn) goes
    under the axes, wrapped to the figure's width (a line past its edge would be cut off)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    bottom = 0.0
    if footer:
        lines = footer_lines(footer, fig.get_figwidth())
        text = "\n".join(lines)
        fig.text(0.01, 0.005, text, fontsize=FOOTER_PT, color="0.35", ha="left", va="bottom")
        bottom = (len(lines) * FOOTER_PT * 1.25 + 2) / (fig.get_figheight() * 72)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(path, dpi=DPI)
    pyplot().close(fig)
