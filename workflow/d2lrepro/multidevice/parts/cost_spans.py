"""The spreads of the cost model's ratios (:mod:`d2lrepro.multidevice.cost_model`): each time
of a row is a median over repeats with its IQR, and a ratio of times holds between the ends its
parts' spans give it."""

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


def t1_over_t2_width(row) -> float:
    """The spread the IQRs of t1 and t2 give t1 / t2: the width of its span."""
    low, high = quotient(span(row, "t1"), span(row, "t2"))
    return high - low


def step_widths(row) -> tuple[float, float, float]:
    """The spreads the times' IQRs give the step over max(t1, t2) and the step's distances
    |r - 1| from max(t1, t2) and from t1 + t2: the widths of their spans."""
    step = span(row, "measured_step")

    def distance(low: float, high: float) -> float:  # from 0 where the span holds 1
        ends = sorted(abs(end - 1) for end in (low, high))
        return ends[1] - (0.0 if low <= 1 <= high else ends[0])

    to_max, to_sum = quotient(step, span(row, "max")), quotient(step, span(row, "sum"))
    return to_max[1] - to_max[0], distance(*to_max), distance(*to_sum)
