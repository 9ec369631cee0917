"""Tidy result files: one row per measurement, long format."""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path

import pandas as pd

from d2lrepro.core import provenance

METRIC_COLUMNS = ["metric", "value", "unit", "device", "note", "status", provenance.COLUMN]
# A metric's status when it has no number: this machine cannot measure it, or the run that
# should have measured it diverged or failed. The two lead to different verdicts.
NOT_APPLICABLE = "not applicable"
FAILED = "failed"
STATUSES = ("", NOT_APPLICABLE, FAILED)
# Every unit a metric may carry, and what it measures. A time, size, bandwidth, throughput or
# speed-up is positive: a zero or a negative one is a broken measurement, never a fast one. A
# p-value lies in [0, 1]; a distance ("|Δ|": an absolute difference, a largest gap, how far a
# curve strays outside a band) is at least 0. "" is a pure number (an accuracy, a loss, a
# slope, a signed difference): any finite value. "hex" is the leading digits of a digest (a
# file's SHA-1), a whole number at least 0, shown in hexadecimal as digests are printed.
UNITS = {
    "": "number",
    "s": "time",
    "ms": "time",
    "µs": "time",
    "ns": "time",
    "B": "size",
    "MB": "size",
    "MiB": "size",
    "GFLOP": "work",
    "FLOP/B": "intensity",
    "GB/s": "bandwidth",
    "samples/s": "throughput",
    "x": "speed-up",
    "p": "p-value",
    "|Δ|": "distance",
    "hex": "digest",
}
POSITIVE = {"time", "size", "work", "intensity", "bandwidth", "throughput", "speed-up"}
# Units a number is not followed by: its metric's name says them ("sign_p = 0.03", not
# "0.03 p").
UNSHOWN = {"", "p", "|Δ|", "hex"}
# What a metric's name says it is, by how it ends (after a spread's "_iqr"), and so the unit it
# is in, the first that matches: a row may leave that unit out, never give another
# (pipeline.evidence.units), so that a time of -1 named "_s" is never judged as a pure number.
NAMED_UNITS = (
    (r"[._]samples_per_s", "samples/s"),
    (r"[._]sec_per_epoch", "s"),
    (r"[._]flops_per_byte", "FLOP/B"),
    (r"[._]s", "s"),
    (r"[._]ms", "ms"),
    (r"[._]us", "µs"),
    (r"[._]ns", "ns"),
    (r"[._]bytes", "B"),
    (r"[._]mb", "MB"),
    (r"[._]mib", "MiB"),
    (r"[._]gbps", "GB/s"),
    (r"[._]gflops", "GFLOP"),
    (r"[._]speedup", "x"),
    (r"_p", "p"),
    (r"[._]curve_excess(?:_agreed|_nearest_seed)?", "|Δ|"),
    (r"_gap", "|Δ|"),  # a largest gap; "<run>.gap", train minus test accuracy, has a sign
    (r"_diff", "|Δ|"),
)
# One row per epoch of a multi-device training run, whichever code path ran it.
HISTORY_COLUMNS = [
    "epoch",
    "train_loss",
    "train_acc",
    "test_acc",
    "seconds",
    "samples_per_s",
    "devices",
    "world_size",
    "model",
    "batch_size",
    "lr",
    "diverged",
]
# A run's top-k log: every topk_every-th batch of an epoch, from the epoch's start.
TOPK_COLUMNS = ["epoch", "batch", "train_loss", "top1", "top5"]
log = logging.getLogger("d2lrepro")

# A run has diverged once its loss is not finite or this many times its first value.
DIVERGENCE_FACTOR = 3.0


def exploded(loss: float, first: float) -> bool:
    """Whether a training loss says the run diverged: non-finite, or far above its start."""
    return not math.isfinite(loss) or loss > DIVERGENCE_FACTOR * first


def iqr(values) -> float:
    """The interquartile range of ``values`` (0 for one value)."""
    series = pd.Series(values)
    return float(series.quantile(0.75) - series.quantile(0.25))


# How runs spread beside their median ``<metric>``: their quartiles, their extremes and how
# many there were, as ``<metric>_<part>`` (a check of typical runs reads them).
RUN_SPREAD = ("q1", "q3", "min", "max", "runs")


def run_spread(metric: str, values) -> dict[str, float]:
    """The parts of :data:`RUN_SPREAD` of the runs' ``values`` of ``metric``, by the name of
    each part's own metric (:func:`run_spread_names`)."""
    series = pd.Series(values)
    parts = [*series.quantile([0.25, 0.75, 0.0, 1.0]).tolist(), float(len(series))]
    return dict(zip(run_spread_names(metric).values(), parts))


def run_spread_names(metric: str) -> dict[str, str]:
    """Each part of :data:`RUN_SPREAD` of ``metric``, by the name of its own metric."""
    return {part: f"{metric}_{part}" for part in RUN_SPREAD}


def quotient(numerator: tuple, denominator: tuple) -> tuple[float, float]:
    """The ends of a quotient of two spans (low, high); unbounded above where the
    denominator's low end reaches zero."""
    high = numerator[1] / denominator[0] if denominator[0] > 0 else math.inf
    return numerator[0] / denominator[1], high


def late_iqr(values, last: int = 5) -> float:
    """The interquartile range of a run's last ``last`` epoch values: how much its final
    number moves from epoch to epoch, the noise an ordering of one run per setting must beat."""
    return iqr(pd.Series(values).iloc[-last:])


def seed_spread(per_seed, one_run: float) -> float:
    """The spread an ordering between settings must beat: the IQR across seeds where there are
    several, else ``one_run``, the single run's own estimate (its late-epoch IQR)."""
    return iqr(per_seed) if len(per_seed) > 1 else one_run


def sign_test_p(wins: int, n: int) -> float:
    """One-sided sign test: the chance of ``wins`` or more of ``n`` paired comparisons going
    one way when either way is as likely (1 for no comparisons)."""
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n


def least_sign_p(
    name: str, informative: int, what: str, more: str, device: str, alpha: float = 0.05
) -> dict:
    """The metric ``name``: the smallest p-value a one-sided sign test over ``informative``
    comparisons (``what`` they are) can give, every one agreeing; its note says how many it
    needs for p < ``alpha`` and what gives ``more``. A test whose data cannot reach its
    threshold cannot tell, whatever the runs say."""
    needed = next(n for n in range(1, 64) if sign_test_p(n, n) < alpha)
    note = (
        f"{informative} informative {what}; a one-sided sign test needs at least {needed} that"
        f" agree for p < {alpha:g}: {more}"
    )
    return metric(name, sign_test_p(informative, informative), "p", device, note)


def diverged(losses: list[float]) -> bool:
    """Whether a run whose per-epoch losses so far are ``losses`` has diverged by now."""
    return any(exploded(loss, losses[0]) for loss in losses)


def metric(
    name: str,
    value: float,
    unit: str = "",
    device: str = "cpu",
    note: str = "",
    status: str = "",
    machine: str = "",
) -> dict:
    """One measured value (``status`` empty), or none, with a ``status`` and a ``note`` why;
    ``machine``: the ids of the machines that measured it where they are not this job's
    (:mod:`d2lrepro.core.provenance`)."""
    if unit not in UNITS:
        raise ValueError(f"metric {name}: unknown unit {unit!r} (known: {sorted(UNITS)})")
    if status not in STATUSES:
        raise ValueError(f"metric {name}: unknown status {status!r} (known: {STATUSES})")
    if status and not note:
        raise ValueError(f"metric {name}: {status!r} without a note saying why")
    return {
        "metric": name,
        "value": float(value),
        "unit": unit,
        "device": device,
        "note": note,
        "status": status,
        provenance.COLUMN: machine,
    }


def named_unit(name: str) -> str | None:
    """The unit metric ``name`` says it is in (:data:`NAMED_UNITS`); None where it says none."""
    for end, unit in NAMED_UNITS:
        if re.search(end + r"(?:_iqr)?$", name):
            return unit
    return None


# Each kind of quantity with a domain: whether a finite value lies in it, and its words.
DOMAINS = {
    "p-value": (lambda v: 0 <= v <= 1, "lies between 0 and 1"),
    "distance": (lambda v: v >= 0, "is at least 0"),
    "digest": (lambda v: v >= 0 and v == int(v), "is a whole number at least 0"),
} | {what: (lambda v: v > 0, "is positive") for what in POSITIVE}


def outside_domain(value: float, unit: str) -> bool:
    """Whether a finite ``value`` in ``unit`` cannot be a measurement: a time, size, bandwidth,
    throughput or speed-up of zero or below, a p-value outside [0, 1], a negative distance."""
    inside, _ = DOMAINS.get(UNITS[unit], (lambda v: True, ""))
    return not inside(value)


def domain(unit: str) -> str:
    """What a number in ``unit`` must be, in words ("a time is positive")."""
    what = UNITS[unit]
    article = "an" if what[0] in "aeiou" else "a"
    return f"{article} {what} {DOMAINS.get(what, (None, 'is finite'))[1]}"


def with_unit(text: str, unit: str) -> str:
    """A number's ``text`` with its unit where one follows it ("2 s", "0.03")."""
    return text if unit in UNSHOWN else f"{text} {unit}"


def exact(value: float, unit: str) -> str | None:
    """``value`` in full where rounding would hide what it is: a byte count with thousands
    marked ("41,943,040 B": two counts a few bytes apart are told apart), a digest's leading
    digits in hexadecimal ("76e5be1548fd"); None for any other unit or a value not finite."""
    if unit == "B" and math.isfinite(value):
        return f"{value:,.12g} B"
    if unit == "hex" and math.isfinite(value) and value >= 0:
        return f"{int(value):x}"
    return None


def not_applicable(
    name: str, reason: str, unit: str = "", device: str = "", machine: str = ""
) -> dict:
    """A metric this machine cannot measure, and why."""
    return metric(name, math.nan, unit, device, reason, NOT_APPLICABLE, machine)


def failed(name: str, reason: str, unit: str = "", device: str = "", machine: str = "") -> dict:
    """A metric whose run diverged, failed or produced no number, and what happened."""
    return metric(name, math.nan, unit, device, reason, FAILED, machine)


def unmeasured(rows: list[dict], reason: str) -> list[dict]:
    """The same metrics as ``rows``, not measured, for ``reason``."""
    return [not_applicable(row["metric"], reason, row["unit"]) for row in rows]


def text(values: pd.Series) -> pd.Series:
    """A text column as read from a CSV, its empty cells as "" (pandas reads a column with no
    text at all as numbers, NaN, and will not fill numbers with text)."""
    return values.astype(object).where(values.notna(), "").astype(str)


def read_metrics(path) -> pd.DataFrame:
    """A metrics CSV as :func:`write_metrics` wrote it: its text columns as text, "" where
    empty (a machine id of digits stays text)."""
    texts = [c for c in METRIC_COLUMNS if c != "value"]
    frame = pd.read_csv(path, dtype=dict.fromkeys(texts, str))
    return frame.assign(**{c: text(frame[c]) for c in texts if c in frame})


def one_line(error: Exception) -> str:
    """An exception as one line, for a note: its type and the first line of its message."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def write_csv(
    rows: list[dict] | pd.DataFrame, path: Path, columns: list[str] | None = None
) -> pd.DataFrame:
    """Write a table; in a job, its rows name the machine that measured them where they name
    none (:func:`d2lrepro.core.provenance.attribute`)."""
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows, columns=columns)
    frame = provenance.attribute(frame)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return frame


def write_not_applicable(path: Path, reason: str) -> pd.DataFrame:
    """A run that cannot happen here: one ``note`` row with the reason, in place of its rows."""
    log.info("not applicable here: %s", reason)
    return write_csv(pd.DataFrame({"note": [reason]}), path)


def write_metrics(rows: list[dict], path: Path) -> pd.DataFrame:
    """Write the rows, and log each one: the job's log shows every number it measured."""
    for row in rows:
        value, unit = row["value"], row["unit"]
        shown = exact(value, unit) or with_unit(f"{value:.6g}", unit)
        log.info("%s = %s %s", row["metric"], shown, row["note"])
    return write_csv(rows, path, METRIC_COLUMNS)
