"""Figures in the book's style: d2l's 3.5x2.5 in axes and line formats, saved as PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

BOOK_FIGSIZE = (3.5, 2.5)
BOOK_FORMATS = ("-", "m--", "g-.", "r:")
DPI = 150

# matplotlib's tab10 colours, as in the book; color_codes off so 'm--' stays magenta.
sns.set_theme(context="paper", style="ticks", palette="tab10", font_scale=0.9, color_codes=False)


def figure(figsize=BOOK_FIGSIZE, **kwargs):
    return plt.subplots(figsize=figsize, **kwargs)


def plot_lines(ax, x, ys, xlabel=None, ylabel=None, legend=None, fmts=BOOK_FORMATS):
    """d2l.plot: one line per y with the book's formats (blue solid, magenta dashed, ...)."""
    for y, fmt in zip(ys, fmts * (len(ys) // len(fmts) + 1)):
        ax.plot(x, y, fmt)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if legend:
        ax.legend(legend)
    ax.grid(True)


def annotate(ax, text, xy, xytext):
    # An explicit colour: seaborn's theme draws patches, arrows included, with white edges.
    ax.annotate(text, xy=xy, xytext=xytext, arrowprops=dict(arrowstyle="->", color="black"))


def save(fig, path: Path, footer: str | None = None) -> None:
    """Save as PNG; ``footer`` (e.g. the hardware description) goes under the axes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if footer:
        fig.text(0.01, 0.005, footer, fontsize=5.5, color="0.35", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.04 if footer else 0, 1, 1))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
