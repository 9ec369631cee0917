"""The checks a claim may make (the ledger's small vocabulary); what a metric must be to be
judged at all is :mod:`.evidence`'s."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from d2lrepro.core.results import (
    UNITS,
    exact,
    quotient,
    run_spread_names,
    with_unit,
)


@dataclass
class Outcome:
    measured: str
    passed: bool
    within_noise: bool = False  # failed with its bound inside the measured spread
    finite: bool = True  # False: a number it derived is not finite, so it measured nothing
    out_of_reach: bool = False  # failed where its data could not have met the bound


# What a time, a rate or a speed-up is: a check of a timed claim that reads one with no
# measured spread cannot tell a difference from the noise.
TIMINGS = {"time", "bandwidth", "throughput", "speed-up"}


# A check whose bound lies within the measured spread (over the repeats, rounds, chains, seeds
# or epochs its IQR is taken over): this run cannot tell which side it is on, and says so.
NOISE = "within the measured noise"
WITHIN_NOISE = f"{NOISE} (the bound lies inside the spread)"
# A check of the typical run that misses where the run nearest the book meets the bound.
NEAREST_MEETS = f"{NOISE} (the run nearest the book meets the bound)"
# A typical check whose window meets some of the runs, not their middle half.
EXTREMES_MEET = f"{NOISE} (the editions' window meets only the runs' extremes)"
# Units a bound is preceded by, as their metrics' names say them: "needs p < 0.05".
NAMED_BEFORE = ("p", "|Δ|")


def fmt(value: float) -> str:
    return f"{value:.6g}"


def quantity(value: float, unit: str, text: str | None = None) -> str:
    """``value`` (shown as ``text``, else :func:`fmt`) with its ``unit``: "0.0413 s", "1.96x",
    a byte count in full with thousands marked ("41,943,040 B": two counts a few bytes apart
    are told apart), a digest's leading digits in hexadecimal ("76e5be1548fd"), a p-value
    bare (its metric's name says it). A ratio of two units is written as one ("s/B")."""
    if (full := exact(value, unit)) is not None:
        return full
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
    whose derived numbers are not all finite fails in every kind, marked as no number, unless
    a spread it reads is unbounded (+inf: a denominator's spread reaching 0), whose ends are
    noise: the bound then lies within them.
    """
    kind = check["kind"]
    if kind not in KINDS:
        raise ValueError(f"unknown check kind {kind!r}")
    read = Reading(value, name, unit, check.get("spread", {}))
    outcome, derived = KINDS[kind](check, read)
    unbounded = any(value(s) == math.inf for s in read.spread.values())
    if unbounded or all(math.isfinite(x) for x in derived):
        return outcome
    return Outcome(outcome.measured.removesuffix(f", {WITHIN_NOISE}"), False, finite=False)


@dataclass
class Reading:
    """What a check reads of its metrics: each one's value, label, unit and spread."""

    value: Callable[[str], float]
    name: Callable[[str], str]
    unit: Callable[[str], str]
    spread: dict  # metric -> the metric of its IQR

    def half(self, metric: str) -> float:
        """Half the metric's spread; 0 where it has none."""
        return self.value(self.spread[metric]) / 2 if metric in self.spread else 0.0

    def span(self, metric: str) -> tuple[float, float]:
        """The lower and the upper end of the metric's spread (median -+ IQR / 2)."""
        v, h = self.value(metric), self.half(metric)
        return v - h, v + h

    def shown(self, metric: str) -> str:
        return f"{self.name(metric)} = {quantity(self.value(metric), self.unit(metric))}"

    def ends(self, metrics, low, high, unit, digits=None, form=", {}") -> str:
        """The two ends of a judged spread (``digits`` significant) in ``form``, so that a
        reader sees the bound between or beyond them; "" where none of ``metrics`` has a
        spread. An end may be unbounded (a denominator's spread reaching 0)."""
        if not any(self.half(m) for m in metrics):
            return ""

        def end(x):
            text = None if digits is None else f"{x:.{digits}g}"
            return quantity(x, unit, text) if math.isfinite(x) else "no bound"

        return form.format(f"spread {end(low)} to {end(high)}")


def _beyond(sign: str, low: float, high: float, limit: float) -> tuple[bool, bool]:
    """Whether a spread ``low`` to ``high`` lies on the side ``sign`` of ``limit`` at its
    pessimistic end (the margin), and at its optimistic end (the reach)."""
    if sign == ">":
        return low > limit, high > limit
    return high < limit, low < limit


def _noisy(text: str, margin: bool, reach: bool) -> Outcome:
    """``margin``: the check holds at the pessimistic ends; ``reach``: at the optimistic."""
    if reach and not margin:
        return Outcome(f"{text}, {WITHIN_NOISE}", False, within_noise=True)
    return Outcome(text, margin)


def _not_positive(text: str, what: str, needs: str = "") -> tuple[Outcome, list[float]]:
    """A quotient over a time or size of zero is a broken measurement, not an infinite one."""
    return Outcome(f"{text}: the {what} is not positive{needs}", False), []


# Each kind of check: (check, reading) -> its outcome and the numbers it derived.


def _bound(sign: str, check: dict, read: Reading) -> tuple[Outcome, list[float]]:
    m, limit = check["metric"], check["bound"]
    (low, high), u = read.span(m), read.unit(m)
    text = f"{read.shown(m)}{read.ends([m], low, high, u)} (needs {bound(sign, limit, u)})"
    outcome = _noisy(text, *_beyond(sign, low, high, limit))
    nearest = check.get("nearest")
    if nearest and not outcome.passed and _beyond(sign, *[read.value(nearest)] * 2, limit)[0]:
        # The book's single run could be one of this run's: the miss is within their noise.
        text += f", but {read.shown(nearest)}: {NEAREST_MEETS}"
        return Outcome(text, False, within_noise=True), [low, high]
    least = check.get("least")
    if least and not outcome.passed and not _beyond(sign, *[read.value(least)] * 2, limit)[0]:
        # Even the most favourable data this run could give would miss the bound.
        reach = f"{read.shown(least)} at best, with this run's data"
        return Outcome(f"{text}, out of reach: {reach}", False, out_of_reach=True), [low, high]
    return outcome, [low, high]


def _within(check: dict, read: Reading) -> tuple[Outcome, list[float]]:
    """Within ``tol`` of ``target``; with a spread, its whole spread must lie within (the end
    farther from the target), and where only its nearer end does, it is within the noise."""
    m, target, tol = check["metric"], check["target"], check["tol"]
    (low, high), u = read.span(m), read.unit(m)
    limit = tol * (abs(target) if check.get("relative") else 1.0)
    what = f"{tol:.0%}" if check.get("relative") else quantity(tol, u)
    far = max(abs(low - target), abs(high - target))
    near = 0.0 if low <= target <= high else min(abs(low - target), abs(high - target))
    text = (
        f"{read.shown(m)}{read.ends([m], low, high, u)} (needs ± {what} of {quantity(target, u)})"
    )
    # The distance may overflow where its ends do not (1e308 from -1e308).
    return _noisy(text, far <= limit, near <= limit), [low, high, far]


def _typical(check: dict, read: Reading) -> tuple[Outcome, list[float]]:
    """The book's printed runs are typical runs of this code: the window its ``editions`` print
    (``low`` to ``high``, rounding included) meets the middle half of this run's runs. Beyond
    every run, the book's runs are unlike these: not reproduced where that happens by chance
    with p < 0.05 (every edition beyond all n runs on a side: 2 / C(n + editions, editions)),
    else out of reach; meeting the runs but not their middle half, within their noise."""
    m, low, high, editions = check["metric"], check["low"], check["high"], check["editions"]
    q1, q3, least, most, n = (read.value(name) for name in run_spread_names(m).values())
    u, numbers = read.unit(m), [q1, q3, least, most]
    text = f"{read.shown(m)}, middle half {quantity(q1, u)} to {quantity(q3, u)}, {fmt(n)} runs"
    text += f" {quantity(least, u)} to {quantity(most, u)} (needs the editions'"
    text += f" {quantity(low, u)} to {quantity(high, u)} to meet the middle half)"
    if q3 >= low and q1 <= high:
        return Outcome(text, True), numbers
    if least <= high and most >= low:
        return Outcome(f"{text}, {EXTREMES_MEET}", False, within_noise=True), numbers
    chance = 2 / math.comb(max(int(n), 0) + editions, editions)
    beyond = f"every edition beyond every one of {fmt(n)} runs, p = {chance:.2g} by chance"
    if chance < 0.05:
        return Outcome(f"{text}: {beyond}", False), numbers
    reach = f"{beyond}; from {runs_to_judge(editions)} runs, such a miss is a finding"
    return Outcome(f"{text}, out of reach: {reach}", False, out_of_reach=True), numbers


def runs_to_judge(editions: int) -> int:
    """The fewest runs of which a ``typical`` check can find the book's ``editions`` unlike:
    every edition beyond them all on one side has p < 0.05 by chance."""
    return next(k for k in range(1, 99) if 2 / math.comb(k + editions, editions) < 0.05)


def _ratio(sign: str, check: dict, read: Reading) -> tuple[Outcome, list[float]]:
    num, den, limit = check["numerator"], check["denominator"], check["bound"]
    n, d, u = read.value(num), read.value(den), ratio_unit(read.unit(num), read.unit(den))
    needs = f"(needs {bound(sign, limit, u)})"
    text = f"{read.name(num)} / {read.name(den)} = "
    text += f"{quantity(n, read.unit(num))} / {quantity(d, read.unit(den))}"
    if d <= 0:
        return _not_positive(text, "denominator", f" {needs}")
    low, high = quotient(read.span(num), read.span(den))
    text += f" = {quantity(n / d, u, f'{n / d:.3g}')}{read.ends([num, den], low, high, u, 3)}"
    # The high end may be unbounded where the noise reaches zero; the ratio may not.
    return _noisy(f"{text} {needs}", *_beyond(sign, low, high, limit)), [n / d, low]


def _sum_of_parts(check: dict, read: Reading) -> tuple[Outcome, list[float]]:
    whole, parts = check["whole"], check["parts"]
    w, total, u = read.value(whole), sum(read.value(p) for p in parts), read.unit(whole)
    sums = " + ".join(quantity(read.value(p), read.unit(p)) for p in parts)
    text = f"{read.shown(whole)}, sum of parts {sums} = {quantity(total, u)}"
    if w <= 0:
        return _not_positive(text, "whole")
    limit = check.get("bound", 1)
    needs = "needs whole < sum" if limit == 1 else f"needs sum / whole {bound('>', limit, 'x')}"
    spans = [read.span(p) for p in parts]
    low, high = quotient((sum(s[0] for s in spans), sum(s[1] for s in spans)), read.span(whole))
    between = read.ends([whole, *parts], low, high, "x", 3)
    text += f", sum / whole = {total / w:.3g}x{between} ({needs})"
    return _noisy(text, *_beyond(">", low, high, limit)), [total, total / w, low]


def _exact(check: dict, read: Reading) -> tuple[Outcome, list[float]]:
    m = check["metric"]
    v, decimals, u = read.value(m), check.get("decimals", 6), read.unit(m)
    shown_value, expected = f"{v:.{decimals}f}", f"{check['expected']:.{decimals}f}"
    rounded = "" if float(shown_value) == v else f" → {shown_value}"
    needs = quantity(check["expected"], u, expected)
    needs += "" if u == "hex" else f" to {decimals} decimals"  # a digest has no decimals
    return Outcome(f"{read.shown(m)}{rounded} (needs {needs})", shown_value == expected), []


def _ordering(check: dict, read: Reading) -> tuple[Outcome, list[float]]:
    ms, increasing = check["metrics"], check["order"] == "increasing"
    spans, values = [read.span(m) for m in ms], [read.value(m) for m in ms]
    # Each neighbouring pair, the one that should be the smaller first.
    pairs = list(zip(spans, spans[1:]) if increasing else zip(spans[1:], spans))
    margin = all(a[1] < b[0] for a, b in pairs)
    reach = all(a[0] < b[1] for a, b in pairs)
    items = [
        read.shown(m) + read.ends([m], *span, read.unit(m), form=" ({})")
        for m, span in zip(ms, spans)
    ]
    # Each pair joined by how its medians compare, whatever the order needs.
    signs = ["<" if a < b else ">" if a > b else "=" for a, b in zip(values, values[1:])]
    text = items[0] + "".join(f" {sign} {item}" for sign, item in zip(signs, items[1:]))
    text += f" (needs {(' < ' if increasing else ' > ').join(read.name(m) for m in ms)})"
    return _noisy(text, margin, reach), [x for span in spans for x in span]


# The ledger's check kinds (schemas/claims.schema.yaml), each with how it is judged; a kind
# and its mirror share one judge, told the side of the bound the claim needs.
KINDS = {
    "above": partial(_bound, ">"),
    "below": partial(_bound, "<"),
    "within": _within,
    "typical": _typical,
    "ratio_above": partial(_ratio, ">"),
    "ratio_below": partial(_ratio, "<"),
    "sum_of_parts": _sum_of_parts,
    "exact": _exact,
    "ordering": _ordering,
}


def metrics_of(check: dict) -> list[str]:
    keys = ("metric", "numerator", "denominator", "whole", "least", "nearest")
    names = [check.get(k) for k in keys]
    names = [n for n in names if n] + check.get("parts", []) + check.get("metrics", [])
    if check["kind"] == "typical":
        names += run_spread_names(check["metric"]).values()
    return names + list(check.get("spread", {}).values())


def unmeasured_noise(check: dict, value, unit) -> list[str]:
    """The timings ``check`` reads with no measured spread (none given, or one of 0):
    ``value(metric)`` and ``unit(metric)`` read them. A check of a p-value is a test, which
    weighs the noise itself."""
    spread = check.get("spread", {})
    read = [m for m in metrics_of(check) if m not in spread.values() and m != check.get("least")]
    if any(unit(m) == "p" for m in read):
        return []
    return [
        m for m in read if UNITS[unit(m)] in TIMINGS and not (m in spread and value(spread[m]) > 0)
    ]
