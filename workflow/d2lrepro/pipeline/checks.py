"""The checks a claim may make (the ledger's small vocabulary), and what a metric must be to
be judged at all: a known status, a known unit, a number inside its unit's domain."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from d2lrepro.core.results import STATUSES, UNITS, domain, named_unit, with_unit


@dataclass
class Outcome:
    measured: str
    passed: bool
    within_noise: bool = False  # failed with its bound inside the measured spread
    finite: bool = True  # False: a number it derived is not finite, so it measured nothing


# A check whose bound lies within the measured spread (over the repeats, rounds, chains, seeds
# or epochs its IQR is taken over): this run cannot tell which side it is on, and says so.
WITHIN_NOISE = (
    "within the measured noise (the bound lies between the pessimistic and the optimistic"
    " ends, median ∓ IQR/2)"
)


def fmt(value: float) -> str:
    return f"{value:.6g}"


def apply(check: dict, value, name=lambda m: m) -> Outcome:
    """Apply one check; ``value(metric)`` returns a measured metric, ``name(metric)`` its label.

    With ``spread`` (metric -> the metric of its IQR), a comparison holds only if it also holds
    between the pessimistic ends of the measured spreads (median -+ IQR / 2); a difference
    smaller than the noise does not reproduce a claim. Where the bound lies between the two
    ends (the pessimistic one fails it, the optimistic one meets it), the check fails and says
    it sat within the measured noise: another run of the same code may fall on either side.

    Finite metrics may still give a number that is not one (1e308 / 1e-308 is inf): a check
    whose derived numbers are not all finite fails in every kind, marked as no number.
    """
    outcome, derived = _judge(check, value, name)
    if all(math.isfinite(x) for x in derived):
        return outcome
    return Outcome(outcome.measured.removesuffix(f", {WITHIN_NOISE}"), False, finite=False)


def _judge(check: dict, value, name) -> tuple[Outcome, list[float]]:
    """:func:`apply`'s outcome, and the numbers it derived from the metrics."""
    kind, spread = check["kind"], check.get("spread", {})

    def half(metric):
        return value(spread[metric]) / 2 if metric in spread else 0.0

    def noisy(text, margin, reach):
        """``margin``: the check holds at the pessimistic ends; ``reach``: at the optimistic."""
        if reach and not margin:
            return Outcome(f"{text}, {WITHIN_NOISE}", False, within_noise=True)
        return Outcome(text, margin)

    if kind in ("above", "below"):
        m = check["metric"]
        v, bound, h = value(m), check["bound"], half(m)
        sign = ">" if kind == "above" else "<"
        up = 1 if kind == "above" else -1  # the side of the bound the claim needs
        end, far = v - up * h, v + up * h
        margin, reach = up * (end - bound) > 0, up * (far - bound) > 0
        # Where the spread is judged, the pessimistic end shows how near the bound it came.
        shown = f"{fmt(v)} {'−' if kind == 'above' else '+'} IQR/2 = {fmt(end)}" if h else fmt(v)
        text = f"{name(m)} = {shown} (needs {sign} {fmt(bound)})"
        return noisy(text, margin, reach), [end, far]
    if kind == "within":
        v, target, tol = value(check["metric"]), check["target"], check["tol"]
        scale = abs(target) if check.get("relative") else 1.0
        what = f"{tol:.0%} of" if check.get("relative") else f"± {fmt(tol)} of"
        off = abs(v - target)
        text = f"{name(check['metric'])} = {fmt(v)} (needs {what} {fmt(target)})"
        return Outcome(text, off <= tol * scale), [off]
    if kind in ("ratio_above", "ratio_below"):
        num, den = check["numerator"], check["denominator"]
        n, d, bound = value(num), value(den), check["bound"]
        sign = ">" if kind == "ratio_above" else "<"
        text = f"{name(num)} / {name(den)} = {fmt(n)} / {fmt(d)}"
        if d <= 0:  # a time or size of zero is a broken measurement, not an infinite ratio
            text += f": the denominator is not positive (needs {sign} {fmt(bound)})"
            return Outcome(text, False), []
        low = d - half(den)  # the noise may reach zero: then the ratio is not bounded
        pessimistic = (n - half(num)) / (d + half(den))
        optimistic = (n + half(num)) / low if low > 0 else math.inf
        if kind == "ratio_above":
            margin, reach = pessimistic > bound, optimistic > bound
        else:
            margin, reach = optimistic < bound, pessimistic < bound
        text += f" = {n / d:.3g} (needs {sign} {fmt(bound)})"
        # The optimistic end may be unbounded where the noise reaches zero; the ratio may not.
        return noisy(text, margin, reach), [n / d, pessimistic]
    if kind == "sum_of_parts":
        whole, parts = value(check["whole"]), [value(p) for p in check["parts"]]
        bound, total = check.get("bound", 1), sum(parts)
        text = (
            f"{name(check['whole'])} = {fmt(whole)}, sum of parts "
            f"{' + '.join(fmt(p) for p in parts)} = {fmt(total)}"
        )
        if whole <= 0:
            return Outcome(f"{text}: the whole is not positive", False), []
        needs = "needs whole < sum" if bound == 1 else f"needs sum / whole > {fmt(bound)}"
        low = sum(value(p) - half(p) for p in check["parts"])
        high = sum(value(p) + half(p) for p in check["parts"])
        least = whole - half(check["whole"])
        pessimistic = low / (whole + half(check["whole"]))
        optimistic = high / least if least > 0 else math.inf
        text += f", sum / whole = {total / whole:.3g} ({needs})"
        outcome = noisy(text, pessimistic > bound, optimistic > bound)
        return outcome, [total, total / whole, pessimistic]
    if kind == "exact":
        v, decimals = value(check["metric"]), check.get("decimals", 6)
        shown, expected = f"{v:.{decimals}f}", f"{check['expected']:.{decimals}f}"
        rounded = "" if float(shown) == v else f" → {shown}"
        text = (
            f"{name(check['metric'])} = {fmt(v)}{rounded} (needs {expected} to {decimals} decimals)"
        )
        return Outcome(text, shown == expected), []
    if kind == "ordering":
        ms = check["metrics"]
        increasing = check["order"] == "increasing"
        # Each metric's ends: the lower and the upper end of its spread.
        ends = [(value(m) - half(m), value(m) + half(m)) for m in ms]
        pairs = list(zip(ends, ends[1:]))
        if increasing:
            margin = all(a[1] < b[0] for a, b in pairs)
            reach = all(a[0] < b[1] for a, b in pairs)
        else:
            margin = all(a[0] > b[1] for a, b in pairs)
            reach = all(a[1] > b[0] for a, b in pairs)
        sign = " < " if increasing else " > "
        text = sign.join(f"{name(m)} = {fmt(value(m))}" for m in ms)
        derived = [x for pair in ends for x in pair]
        return noisy(text + " (needs this order)", margin, reach), derived
    raise ValueError(f"unknown check kind {kind!r}")


def metrics_of(check: dict) -> list[str]:
    names = [check.get(k) for k in ("metric", "numerator", "denominator", "whole")]
    names = [n for n in names if n] + check.get("parts", []) + check.get("metrics", [])
    return names + list(check.get("spread", {}).values())


def statuses(used: pd.DataFrame, evidence: str) -> pd.Series:
    """Each metric's status; one the evaluator does not know, or one without a note saying why
    the metric has no number, stops the rule."""
    if "status" not in used:
        return pd.Series("", index=used.index)
    status = used["status"].fillna("").astype(str)
    notes = used["note"].fillna("").astype(str) if "note" in used else status.map(lambda _: "")
    for metric, value, note in zip(used["metric"], status, notes):
        if value not in STATUSES:
            raise ValueError(f"{evidence}: metric {metric} has an unknown status {value!r}")
        if value and not note:
            raise ValueError(f"{evidence}: metric {metric} is {value!r} without a note saying why")
    return status


def units(used: pd.DataFrame, evidence: str) -> dict[str, str]:
    """Each metric's unit. A file without units, or a unit the evaluator does not know, stops
    the rule, since the domain of its numbers (:data:`d2lrepro.core.results.UNITS`) would be
    unknown; so does a unit other than the one the metric's name says
    (:func:`d2lrepro.core.results.named_unit`). A metric without a unit is in the one its name
    says: judged as a pure number, a time of -1 s written without its unit would pass."""
    if "unit" not in used:
        raise ValueError(f"{evidence} has no unit column: its numbers' domains are unknown")
    units = {}
    for metric, unit in zip(used["metric"], used["unit"].fillna("").astype(str)):
        if unit not in UNITS:
            raise ValueError(f"{evidence}: metric {metric} has an unknown unit {unit!r}")
        named = named_unit(metric)
        if named is not None and unit not in ("", named):
            raise ValueError(
                f"{evidence}: metric {metric} has unit {unit!r}, but its name says {named!r}"
            )
        units[metric] = unit or named or ""
    return units


def check_spreads(claim: dict, values: dict, measured: set) -> None:
    """A spread is an IQR: a negative one would widen the margin it should narrow."""
    for check in claim["checks"]:
        for spread in check.get("spread", {}).values():
            if spread in measured and values[spread] < 0:
                raise ValueError(
                    f"{claim['evidence']}: metric {spread}, an IQR, is negative "
                    f"({fmt(values[spread])})"
                )


def no_number(metric: str, value: float, unit: str, name) -> str:
    """Why ``value`` is no measurement: not finite, or outside the domain of its unit."""
    text = f"{name(metric)} = {with_unit(fmt(value), unit)}"
    return text if not math.isfinite(value) else f"{text} ({domain(unit)})"
