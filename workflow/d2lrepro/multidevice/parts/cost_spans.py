"""The spreads of the cost model's ratios (:mod:`d2lrepro.multidevice.cost_model`): each time
of a row is a median over repeats with its IQR, a ratio of times lies between the ends its
parts' spans give it, and its spread is written so that its value -+ half of it holds both
ends (a quotient's span is lopsided: the wider side decides)."""

from __future__ import annotations

from d2lrepro.core.results import quotient


def span(row, name: str) -> tuple[float, float]:
    """The ends of a time of a cost-model row, its median -+ half its IQR over the repeats
    ("max" and "sum": of t1 and t2, from theirs)."""
    if name in ("max", "sum"):
        (a, b), (c, d) = span(row, "t1"), span(row, "t2")
        return (max(a, c), max(b, d)) if name == "max" else (a + c, b + d)
    half = row[f"{name.removeprefix('measured_')}_iqr"] / 2
    return row[name] - half, row[name] + half


def spread(value: float, ends: tuple[float, float]) -> float:
    """The spread of ``value`` whose half reaches both ``ends`` of its span."""
    return 2 * max(value - ends[0], ends[1] - value)


def distance(ends: tuple[float, float]) -> tuple[float, float]:
    """The ends of |r - 1| for r between ``ends``: from 0 where they hold 1."""
    low, high = sorted(abs(end - 1) for end in ends)
    return (0.0 if ends[0] <= 1 <= ends[1] else low), high


def t1_over_t2_spread(row) -> float:
    """The spread the IQRs of t1 and t2 give t1 / t2."""
    return spread(row["t1"] / row["t2"], quotient(span(row, "t1"), span(row, "t2")))


def step_spreads(row) -> tuple[float, float, float]:
    """The spreads the times' IQRs give the step over max(t1, t2), and the step's distances
    |r - 1| from max(t1, t2) and from t1 + t2."""
    step = span(row, "measured_step")
    to_max, to_sum = quotient(step, span(row, "max")), quotient(step, span(row, "sum"))
    over_max = row["measured_step"] / max(row["t1"], row["t2"])
    over_sum = row["measured_step"] / (row["t1"] + row["t2"])
    return (
        spread(over_max, to_max),
        spread(abs(over_max - 1), distance(to_max)),
        spread(abs(over_sum - 1), distance(to_sum)),
    )
