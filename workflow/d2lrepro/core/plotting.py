"""Figures in the book's style: d2l's 3.5x2.5 in axes and line formats, saved as PNG."""

from __future__ import annotations

import functools
import io
import logging
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from d2lrepro.core import legibility

BOOK_FIGSIZE = (3.5, 2.5)
BOOK_FORMATS = ("-", "m--", "g-.", "r:")
DPI = 150
# A saved figure's colours: its flat colours and their anti-aliased edges fit in a palette of
# this many, and a palette PNG takes about a quarter of a true-colour one's bytes.
PALETTE = 256
# The footer's font size (points), and the widest texts' mean character width (in ems) with
# margin, by which texts are wrapped to the width they may take.
FOOTER_PT = 5.5
CHAR_EM = 0.55
# The book's own numbers and curves are drawn in this grey; our measurements never are.
BOOK_GREY = "0.55"
# The report (report/report.html.j2) shows every figure 230 CSS px tall, at 96 px an inch; a
# text meant to be read there (legends, notes) is at least READABLE_PT points at that size.
REPORT_HEIGHT_IN = 230 / 96
READABLE_PT = 7.0
# The gid of a figure's notes (:func:`note`), which :func:`save` stacks above the footer.
NOTE = "note"
# The gid of a panel's tag (:func:`mark_scaled`), which :func:`save` puts where it hides nothing.
TAG = "tag"
# How a preset's scaled settings read in a figure (:func:`scale_note`): the last part of a
# setting's key -> what it counts, and what its null stands for (all of Fashion-MNIST's
# training or test images).
SCALE_WORDS = {
    "train_subset": ("training images", 60_000),
    "test_subset": ("test images", 10_000),
    "epochs": ("epochs", None),
    "seeds": ("seeds", None),
}


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
        legend_readable(ax)
    ax.grid(True)


def readable_pt(fig) -> float:
    """The font size (points) that reads as :data:`READABLE_PT` once the report scales ``fig``
    to its height (never below it)."""
    return READABLE_PT * max(1.0, fig.get_figheight() / REPORT_HEIGHT_IN)


def legend_readable(ax, **kwargs):
    """``ax.legend(**kwargs)`` in a font the report's reader can read (the theme's, if larger)."""
    from matplotlib import font_manager, rcParams

    theme = font_manager.FontProperties(size=rcParams["legend.fontsize"]).get_size_in_points()
    return ax.legend(fontsize=max(readable_pt(ax.figure), theme), **kwargs)


def wrap(text: str, width_in: float, pt: float) -> list[str]:
    """``text`` as the lines it takes in ``width_in`` inches at ``pt`` points."""
    return textwrap.wrap(text, max(int(width_in * 72 / (pt * CHAR_EM)), 10))


def no_data(ax, reason: str) -> None:
    """A panel with nothing measured: ``reason`` inside it, wrapped to its width, and no
    ticks or axis labels that would suggest a scale."""
    pt = readable_pt(ax.figure)
    width = ax.get_position().width * ax.figure.get_figwidth() * 0.9
    text = "\n".join(wrap(reason, width, pt))
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=pt)
    ax.set(xticks=[], yticks=[], xlabel="", ylabel="")


def note(fig, *texts: str) -> None:
    """Sentences about the whole figure (what it lacks, the scale it ran at) under its axes,
    the empty ones left out, wrapped to its width; :func:`save` makes room for them above the
    footer. None if every text is empty."""
    text = " ".join(filter(None, texts))
    if not text:
        return
    pt = readable_pt(fig)
    lines = "\n".join(wrap(text, fig.get_figwidth() * 0.95, pt))
    fig.text(0.5, 0, lines, ha="center", va="bottom", fontsize=pt, gid=NOTE)


def _scaled(scaled: list):
    """Each setting of :data:`SCALE_WORDS` that a preset scaled (``scaled``: [key, book
    preset's value, this run's value] of each setting that differs), as (the run it is of, ""
    for every run; what it counts; this run's count; the book preset's)."""
    for key, book, value in scaled:
        where, _, name = key.rpartition(".")
        if name in SCALE_WORDS:
            words, whole = SCALE_WORDS[name]
            yield where.partition(".runs.")[2], words, _count(value, whole), _count(book, whole)


def scale_note(scaled: list) -> str:
    """A figure's note on the settings a preset scaled (``scaled``: [key, book preset's value,
    this run's value] of each setting that differs), those of :data:`SCALE_WORDS` only:
    "Scaled from the book preset: 1 of 3 seeds, 3,000 of 60,000 training images."; "" when
    none was scaled. The settings of one run (``<experiment>.runs.<run>.<setting>``) are said
    after its name, once for the runs scaled alike: "…: 1 of 3 seeds; resnet18.1, resnet18.2:
    1 of 10 epochs, …"."""
    said: dict[str, list[str]] = {}
    for run, words, ours, books in _scaled(scaled):
        if ours < books:
            part = f"{ours:,} of {books:,} {words}"
        else:
            part = f"{ours:,} {words} (the book preset: {books:,})"
        said.setdefault(run, []).append(part)
    alike: dict[tuple[bool, str], list[str]] = {}  # (of a run, its parts) -> the runs
    for run, p in said.items():
        alike.setdefault((bool(run), ", ".join(p)), []).append(run)
    parts = [
        f"{', '.join(runs) + ': ' if of_run else ''}{p}" for (of_run, p), runs in alike.items()
    ]
    return f"Scaled from the book preset: {'; '.join(parts)}." if parts else ""


def mark_scaled(ax, scaled: list) -> str:
    """Says inside ``ax`` that what it draws ran at a preset's scale: each count of
    :data:`SCALE_WORDS` the runs had, once ("scaled: 1 seed, 1 epoch, 1,024 or 32 training
    images"), in a box that :func:`save` puts where it hides nothing
    (:func:`~d2lrepro.core.legibility.place_clear`); returns the figure's note with the details
    (:func:`scale_note`), "" when nothing was scaled."""
    counts: dict[str, list[int]] = {}
    for _, words, ours, _ in _scaled(scaled):
        counts.setdefault(words, [])
        counts[words] += [] if ours in counts[words] else [ours]
    if not counts:
        return ""
    parts = [
        f"{' or '.join(f'{n:,}' for n in ns)} {words[:-1] if ns == [1] else words}"
        for words, ns in counts.items()
    ]
    pt = readable_pt(ax.figure)
    width = ax.get_position().width * ax.figure.get_figwidth() * 0.9
    text = "\n".join(wrap("scaled: " + ", ".join(parts), width, pt))
    box = {"boxstyle": "round,pad=0.3", "facecolor": "white", "edgecolor": "0.6", "alpha": 0.85}
    ax.text(0, 0, text, transform=ax.transAxes, fontsize=pt, bbox=box, zorder=5, gid=TAG)
    return scale_note(scaled)


def _count(value, whole: int | None) -> int:
    """A setting of :data:`SCALE_WORDS` as a count: a list's length, null the ``whole``."""
    return whole if value is None else len(value) if isinstance(value, list) else value


def annotate(ax, text, xy, xytext):
    # An explicit colour: seaborn's theme draws patches, arrows included, with white edges.
    ax.annotate(text, xy=xy, xytext=xytext, arrowprops=dict(arrowstyle="->", color="black"))


def metric_table(metrics: pd.DataFrame, pattern: str) -> pd.DataFrame:
    """The metrics whose names match ``pattern``, its groups as columns beside ``value``."""
    parts = metrics["metric"].str.extract(pattern)
    keep = parts.notna().all(axis=1)
    return parts[keep].assign(value=metrics.loc[keep, "value"].astype(float))


def grouped_bars(ax, table: pd.DataFrame, groups: list, bars: list) -> dict:
    """Bars of ``table``'s median_s per (group, bar), grouped along x, with error bars spanning
    iqr_s and, where the table has naive_s, hollow markers for it, in the bar's colour. Returns
    each bar's x positions, one per group."""
    width = 0.8 / len(bars)
    positions = {}
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
        positions[bar] = x
    ax.set_xticks(np.arange(len(groups)))
    return positions


def mark_divergence(ax, history: pd.DataFrame, x: str = "epoch") -> None:
    """A red line and label where ``history`` first has ``diverged`` True, if it has."""
    if "diverged" in history and history["diverged"].astype(bool).any():
        at = history.loc[history["diverged"].astype(bool), x].iloc[0]
        ax.axvline(at, color="red", linewidth=1)
        pt = readable_pt(ax.figure)
        ax.text(at, 0.5, " diverged", color="red", transform=ax.get_xaxis_transform(), fontsize=pt)


def footer_lines(footer: str, width_in: float) -> list[str]:
    """``footer`` as the lines it takes on a figure ``width_in`` inches wide: each of its
    "; "-separated parts (a machine) on lines of its own, wrapped to the width."""
    return [line for part in footer.split("; ") for line in wrap(part, width_in, FOOTER_PT)]


def save(fig, path: Path, footer: str | None = None) -> None:
    """Save as PNG (:func:`png`); ``footer`` (the machines and devices that measured the data
    drawn) goes under the axes, wrapped to the figure's width (a line past its edge would be cut
    off), the figure's notes (:func:`note`) above it, and its panels' tags (:func:`mark_scaled`)
    where they hide nothing (:func:`~d2lrepro.core.legibility.place_clear`). What the figure
    lacks for a reader (:func:`~d2lrepro.core.legibility.problems`) is logged as a warning."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for problem in legibility.problems(fig):
        logging.getLogger(__name__).warning("figure %s: %s", path, problem)
    height_pt = fig.get_figheight() * 72
    bottom = 0.0
    if footer:
        lines = footer_lines(footer, fig.get_figwidth())
        text = "\n".join(lines)
        fig.text(0.01, 0.005, text, fontsize=FOOTER_PT, color="0.35", ha="left", va="bottom")
        bottom = (len(lines) * FOOTER_PT * 1.25 + 2) / height_pt
    for text in (t for t in fig.texts if t.get_gid() == NOTE):
        text.set_y(bottom + 2 / height_pt)
        lines = text.get_text().count("\n") + 1
        bottom += (lines * text.get_fontsize() * 1.25 + 4) / height_pt
    fig.tight_layout(rect=(0, bottom, 1, 1))
    tags = [(ax, t) for ax in fig.axes for t in ax.texts if t.get_gid() == TAG]
    if tags:
        fig.draw_without_rendering()  # the legends where they will be
        if not all([legibility.place_clear(ax, tag) for ax, tag in tags]):
            fig.tight_layout(rect=(0, bottom, 1, 1))  # room for a tag above its panel
    path.write_bytes(png(fig))


def png(fig) -> bytes:
    """``fig`` as a PNG of :data:`PALETTE` colours (no dithering, which would only add noise to
    flat colours), at :data:`DPI`; closes the figure."""
    from PIL import Image

    drawn, saved = io.BytesIO(), io.BytesIO()
    fig.savefig(drawn, format="png", dpi=DPI)
    pyplot().close(fig)
    image = Image.open(drawn).convert("RGB")
    image.quantize(PALETTE, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE).save(
        saved, format="png", optimize=True
    )
    return saved.getvalue()
