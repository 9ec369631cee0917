"""The book's curves, point by point (EN and ZH editions, read off the evaluated notebooks'
plots to about ±0.001): drawn beside ours, and the band they span that our curves are judged
against. Reference data only, never a measurement."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from d2lrepro.core import paths, plotting

BOOK_CURVES = paths.BOOK_CURVES
EDITION_LABELS = {"en-1.0.3": "book EN", "zh-2.0.0": "book ZH"}
EDITION_STYLES = {"en-1.0.3": ":", "zh-2.0.0": "--"}
# Each edition's marker, where the line style tells the book's runs apart (or there is no line).
EDITION_MARKERS = {"en-1.0.3": "x", "zh-2.0.0": "+"}
# The times the book printed (seconds; book_outputs.md) that figures draw beside ours, by the
# ledger id of the claim that quotes them, then edition, then what was timed.
PRINTED_S = {
    # 1000 forward passes of the MLP at batch 1 on the CPU, eager, then scripted.
    "hyb.bench": {
        "en-1.0.3": {"eager": 2.1447, "script": 4.0545},
        "zh-2.0.0": {"eager": 0.1361, "script": 0.1204},
    },
    # 50 products of 4000 x 4000 matrices on each of 2 GPUs: GPU1 alone, GPU2 alone, both.
    "autopar.both": {
        "en-1.0.3": {"a": 0.4660, "b": 0.4510, "both": 0.4659},
        "zh-2.0.0": {"a": 0.4600, "b": 0.4706, "both": 0.4580},
    },
}


def load(path: Path = BOOK_CURVES) -> pd.DataFrame:
    return pd.read_csv(path)


def curve(curves: pd.DataFrame, claim_id: str, metric: str) -> pd.DataFrame:
    """The book's points of one curve: edition, epoch, value."""
    return curves[(curves["id"] == claim_id) & (curves["metric"] == metric)]


def band_excess(
    curves: pd.DataFrame,
    claim_id: str,
    metric: str,
    x,
    y,
    y_high=None,
    clip=None,
    agree_within=None,
) -> float:
    """How far our curve strays outside the band the book's editions span: over the book's
    points within our x range, the largest gap between our values there (interpolated; with
    ``y_high``, the interval from ``y`` to ``y_high``, such as the range over seeds, so that
    our own noise is not counted against the book) and [lowest, highest] edition value. 0
    where they overlap everywhere, NaN where the curves share no x.

    With ``clip``, the top of the book's y-axis: at each of our x before an edition's first
    point, that edition's curve ran above the plot, so the band there is [clip, inf).

    With ``agree_within``, only the book's points where the editions lie at most that far
    apart are judged (NaN where there are none): where they part further, the book gives no
    one curve to follow."""
    book = curve(curves, claim_id, metric)
    if agree_within is not None:
        table = book.pivot_table(index="epoch", columns="edition", values="value")
        gap = table.max(axis=1) - table.min(axis=1)
        book = book[book["epoch"].isin(gap.index[gap <= agree_within + 1e-9])]
    x, low = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    high = low if y_high is None else np.asarray(y_high, dtype=float)
    if not len(book) or not len(x):
        return math.nan
    table = book.pivot_table(index="epoch", columns="edition", values="value")
    if clip is not None:
        firsts = table.apply(pd.Series.first_valid_index)
        early = [v for v in x if 0 < v < firsts.max() and np.abs(table.index - v).min() > 1e-3]
        table = table.reindex(table.index.union(early))
        above = table.index.to_numpy()[:, None] < firsts.to_numpy()[None, :] - 1e-9
        lows, highs = table.mask(above, clip), table.mask(above, math.inf)
    else:
        lows, highs = table, table
    keep = (table.index >= x.min() - 1e-9) & (table.index <= x.max() + 1e-9)
    band_low, band_high = lows[keep].min(axis=1), highs[keep].max(axis=1)
    if not len(band_low):
        return math.nan
    at = band_low.index.to_numpy()
    ours_low, ours_high = np.interp(at, x, low), np.interp(at, x, high)
    below = band_low.to_numpy() - ours_high  # our whole interval under the band
    above = ours_low - band_high.to_numpy()  # or over it
    return float(np.max(np.maximum(0.0, np.maximum(below, above))))


# The seeds' quartiles whose band a curve claim judges the book's against: their middle half,
# where typical runs of this code lie.
MIDDLE_HALF = (0.25, 0.75)


def middle_half(runs: pd.DataFrame, y: str) -> tuple[pd.Series, pd.Series]:
    """The seeds' quartiles of ``y`` at each epoch of ``runs`` (:data:`MIDDLE_HALF`)."""
    values = runs.groupby("epoch")[y]
    return values.quantile(MIDDLE_HALF[0]), values.quantile(MIDDLE_HALF[1])


def seeds_excess(
    curves: pd.DataFrame, claim_id: str, metric: str, runs: pd.DataFrame, y: str, clip=None
) -> dict[str, float]:
    """How far the band of the book's editions of ``claim_id`` lies from the seeds of ``runs``
    (column ``y`` by 'epoch' and 'seed'; :func:`band_excess`, with ``clip``). The book printed
    single runs, so each edition's curve is judged as one run of this code, not against the
    seeds' median: ``curve_excess`` from the seeds' middle half at each point,
    ``curve_excess_nearest_seed`` from the one seed whose own curve lies nearest the band over
    the whole plot (NaN where no seed's curve shares an epoch with the book's)."""
    low, high = middle_half(runs, y)
    excess = [
        band_excess(curves, claim_id, metric, seed["epoch"], seed[y], clip=clip)
        for _, seed in runs.groupby("seed")
    ]
    return {
        "curve_excess": band_excess(
            curves, claim_id, metric, low.index, low.to_numpy(), high.to_numpy(), clip=clip
        ),
        "curve_excess_nearest_seed": min(
            (e for e in excess if not math.isnan(e)), default=math.nan
        ),
    }


def edition_gap(curves: pd.DataFrame, claim_id: str, metric: str) -> float:
    """The largest gap between the book's editions at the points where each drew the curve:
    the tightest tolerance at which the editions reproduce each other."""
    table = curve(curves, claim_id, metric).pivot_table(
        index="epoch", columns="edition", values="value"
    )
    return float((table.max(axis=1) - table.min(axis=1)).max())


def draw(
    ax, curves: pd.DataFrame, claim_id: str, metric: str, what: str = "", linestyle=None
) -> None:
    """The book's editions of one curve on ``ax`` in the book's grey, labelled by edition (and
    ``what``): each edition in its own line style or, with ``linestyle`` (to tell this curve
    from the book's others on the axes), in that style with a marker of its own."""
    for edition, points in curve(curves, claim_id, metric).groupby("edition"):
        style = {"linestyle": EDITION_STYLES.get(edition, "-.")}
        if linestyle:
            style = {"linestyle": linestyle, "marker": EDITION_MARKERS.get(edition, "."), "ms": 4}
        ax.plot(
            points["epoch"],
            points["value"],
            color=plotting.BOOK_GREY,
            linewidth=1,
            label=" ".join(filter(None, [EDITION_LABELS.get(edition, edition), what])),
            **style,
        )


def draw_printed(ax, claim_id: str, x: dict, scale: float = 1.0, what: str = "") -> None:
    """The times the book printed for ``claim_id`` (:data:`PRINTED_S`) on ``ax`` in the book's
    grey, a marker per edition: each timed part at ``x[part]``, times ``scale``, labelled by
    edition (and ``what``)."""
    for edition, times in PRINTED_S[claim_id].items():
        parts = [p for p in times if p in x]
        ax.scatter(
            [x[p] for p in parts],
            [times[p] * scale for p in parts],
            marker=EDITION_MARKERS[edition],
            color=plotting.BOOK_GREY,
            s=40,
            zorder=4,
            label=f"{EDITION_LABELS[edition]}, printed{what}",
        )
