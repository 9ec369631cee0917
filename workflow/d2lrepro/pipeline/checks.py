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
WITHIN_NOISE = "within the measured noise (the bound lies inside the spread)"
# Units a bound is preceded by, as their metrics' names say them: "needs p < 0.05".
NAMED_BEFORE = ("p", "|Δ|")


def fmt(value: float) -> str:
    return f"{value:.6g}"


def quantity(value: float, unit: str, text: str | None = None) -> str:
    """``value`` (shown as ``text``, else :func:`fmt`) with its ``unit``: "0.0413 s", "1.96x",
    a byte count in full with thousands marked ("41,943,040 B": two counts a few bytes apart
    are told apart), a p-value bare (its metric's name says it). A ratio of two units is
    written as one ("s/B")."""
    if unit == "B" and math.isfinite(value):
        return f"{value:,.12g} B"
    text = fmt(value) if text is None else text
    if unit == "x":
        return f"{text}x"
    return with_unit(text, unit) if unit in UNITS else f"{text} {unit}"


def bound(sign: str, value: float, unit: str) -> str:
    """A bound with its unit: "> 1.8x", "< 0.5 s", "p < 0.05"."""
    if unit in NAMED_BEFORE:
        return f"{unit} {sign} {fmt(value)}"
    return f"{sign} {quantity(value, unit)}"


def ratio_unit(numerator: str, denominator: str) -> str:
    """The unit of a ratio: "x" for two numbers in one unit, else the two units' ratio."""
    if numerator == denominator:
        return "x"
    return f"{numerator or '1'}/{denominator}" if denominator else numerator


def apply(check: dict, value, name=lambda m: m, unit=lambda m: "") -> Outcome:
    """Apply one check; ``value(metric)`` returns a measured metric, ``name(metric)`` its label
    and ``unit(metric)`` its unit, shown beside every number.

    With ``spread`` (metric -> the metric of its IQR), a comparison holds only if it also holds
    between the pessimistic ends of the measured spreads (median -+ IQR / 2); a difference
    smaller than the noise does not reproduce a claim. Both ends are shown beside the bound.
    Where the bound lies between the two ends (the pessimistic one fails it, the optimistic
    one meets it), the check fails and says it sat within the measured noise: another run of
    the same code may fall on either side.

    Finite metrics may still give a number that is not one (1e308 / 1e-308 is inf): a check
    whose derived numbers are not all finite fails in every kind, marked as no number.
    """
    outcome, derived = _judge(check, value, name, unit)
    if all(math.isfinite(x) for x in derived):
        return outcome
    return Outcome(outcome.measured.removesuffix(f", {WITHIN_NOISE}"), False, finite=False)


def _judge(check: dict, value, name, unit) -> tuple[Outcome, list[float]]:
    """:func:`apply`'s outcome, and the numbers it derived from the metrics."""
    kind, spread = check["kind"], check.get("spread", {})

    def half(metric):
        return value(spread[metric]) / 2 if metric in spread else 0.0

    def shown(metric):
        return f"{name(metric)} = {quantity(value(metric), unit(metric))}"

    def ends(low, high, u, digits=None):
        """A judged spread's two ends (``digits`` significant), so that a reader sees the
        bound between or beyond them; an end may be unbounded (a denominator's spread
        reaching 0)."""

        def end(x):
            text = None if digits is None else f"{x:.{digits}g}"
            return quantity(x, u, text) if math.isfinite(x) else "no bound"

        return f"spread {end(low)} to {end(high)}"

    def noisy(text, margin, reach):
        """``margin``: the check holds at the pessimistic ends; ``reach``: at the optimistic."""
        if reach and not margin:
            return Outcome(f"{text}, {WITHIN_NOISE}", False, within_noise=True)
        return Outcome(text, margin)

    if kind in ("above", "below"):
        m = check["metric"]
        v, h, u = value(m), half(m), unit(m)
        sign = ">" if kind == "above" else "<"
        up = 1 if kind == "above" else -1  # the side of the bound the claim needs
        end, far = v - up * h, v + up * h
        margin, reach = up * (end - check["bound"]) > 0, up * (far - check["bound"]) > 0
        between = f", {ends(v - h, v + h, u)}" if h else ""
        text = f"{shown(m)}{between} (needs {bound(sign, check['bound'], u)})"
        return noisy(text, margin, reach), [end, far]
    if kind == "within":
        m = check["metric"]
        v, target, tol, u = value(m), check["target"], check["tol"], unit(m)
        scale = abs(target) if check.get("relative") else 1.0
        what = f"{tol:.0%}" if check.get("relative") else quantity(tol, u)
        off = abs(v - target)
        text = f"{shown(m)} (needs ± {what} of {quantity(target, u)})"
        return Outcome(text, off <= tol * scale), [off]
    if kind in ("ratio_above", "ratio_below"):
        num, den = check["numerator"], check["denominator"]
        n, d, u = value(num), value(den), ratio_unit(unit(num), unit(den))
        needs = f"(needs {bound('>' if kind == 'ratio_above' else '<', check['bound'], u)})"
        text = f"{name(num)} / {name(den)} = {quantity(n, unit(num))} / {quantity(d, unit(den))}"
        if d <= 0:  # a time or size of zero is a broken measurement, not an infinite ratio
            return Outcome(f"{text}: the denominator is not positive {needs}", False), []
        least = d - half(den)  # the noise may reach zero: then the ratio is not bounded
        low = (n - half(num)) / (d + half(den))
        high = (n + half(num)) / least if least > 0 else math.inf
        if kind == "ratio_above":
            margin, reach = low > check["bound"], high > check["bound"]
        else:
            margin, reach = high < check["bound"], low < check["bound"]
        text += f" = {quantity(n / d, u, f'{n / d:.3g}')}"
        between = f", {ends(low, high, u, 3)}" if half(num) or half(den) else ""
        # The high end may be unbounded where the noise reaches zero; the ratio may not.
        return noisy(f"{text}{between} {needs}", margin, reach), [n / d, low]
    if kind == "sum_of_parts":
        whole, parts = check["whole"], check["parts"]
        w, total, u = value(whole), sum(value(p) for p in parts), unit(whole)
        text = (
            f"{shown(whole)}, sum of parts "
            f"{' + '.join(quantity(value(p), unit(p)) for p in parts)} = {quantity(total, u)}"
        )
        if w <= 0:
            return Outcome(f"{text}: the whole is not positive", False), []
        limit = check.get("bound", 1)
        needs = "needs whole < sum" if limit == 1 else f"needs sum / whole {bound('>', limit, 'x')}"
        least = w - half(whole)
        low = sum(value(p) - half(p) for p in parts) / (w + half(whole))
        high = sum(value(p) + half(p) for p in parts) / least if least > 0 else math.inf
        between = f", {ends(low, high, 'x', 3)}" if any(map(half, [whole, *parts])) else ""
        text += f", sum / whole = {total / w:.3g}x{between} ({needs})"
        return noisy(text, low > limit, high > limit), [total, total / w, low]
    if kind == "exact":
        m = check["metric"]
        v, decimals, u = value(m), check.get("decimals", 6), unit(m)
        shown_value, expected = f"{v:.{decimals}f}", f"{check['expected']:.{decimals}f}"
        rounded = "" if float(shown_value) == v else f" → {shown_value}"
        needs = f"{quantity(check['expected'], u, expected)} to {decimals} decimals"
        return Outcome(f"{shown(m)}{rounded} (needs {needs})", shown_value == expected), []
    if kind == "ordering":
        ms = check["metrics"]
        increasing = check["order"] == "increasing"
        # Each metric's ends: the lower and the upper end of its spread.
        spans = [(value(m) - half(m), value(m) + half(m)) for m in ms]
        pairs = list(zip(spans, spans[1:]))
        if increasing:
            margin = all(a[1] < b[0] for a, b in pairs)
            reach = all(a[0] < b[1] for a, b in pairs)
        else:
            margin = all(a[0] > b[1] for a, b in pairs)
            reach = all(a[1] > b[0] for a, b in pairs)
        items = [
            f"{shown(m)} ({ends(*span, unit(m))})" if half(m) else shown(m)
            for m, span in zip(ms, spans)
        ]
        text = (" < " if increasing else " > ").join(items)
        derived = [x for span in spans for x in span]
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
    text = f"{name(metric)} = {quantity(value, unit)}"
    return text if not math.isfinite(value) else f"{text} ({domain(unit)})"
