"""What a metric must be to be judged at all: a known status (with a note where it has no
number), a known unit its name agrees with, a spread that is not negative, and a number inside
its unit's domain."""

from __future__ import annotations

import math

import pandas as pd

from d2lrepro.core.results import STATUSES, UNITS, domain, named_unit, run_spread_names, text
from d2lrepro.pipeline.checks import fmt, quantity


def statuses(used: pd.DataFrame, evidence: str) -> pd.Series:
    """Each metric's status; one the evaluator does not know, or one without a note saying why
    the metric has no number, stops the rule."""
    if "status" not in used:
        return pd.Series("", index=used.index)
    status = text(used["status"])
    notes = text(used["note"]) if "note" in used else status.map(lambda _: "")
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
    for metric, unit in zip(used["metric"], text(used["unit"])):
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
    """A spread is an IQR: a negative one would widen the margin it should narrow. The runs a
    typical-run check reads are at least one, and their extremes and quartiles in order."""
    for check in claim["checks"]:
        for spread in check.get("spread", {}).values():
            if spread in measured and values[spread] < 0:
                raise ValueError(
                    f"{claim['evidence']}: metric {spread}, an IQR, is negative "
                    f"({fmt(values[spread])})"
                )
        if check["kind"] != "typical":
            continue
        named = run_spread_names(check["metric"])
        parts = [named[p] for p in ("min", "q1", "q3", "max", "runs")]
        # Numbers that are none (NaN, inf) read "no number was measured" where they are judged.
        if set(parts) <= measured and all(math.isfinite(values[p]) for p in parts):
            *ends, runs = (values[p] for p in parts)
            if not (runs >= 1 and runs == int(runs) and ends == sorted(ends)):
                shown = ", ".join(f"{p} = {fmt(values[p])}" for p in parts)
                raise ValueError(f"{claim['evidence']}: runs out of order or uncounted: {shown}")


def no_number(metric: str, value: float, unit: str, name) -> str:
    """Why ``value`` is no measurement: not finite, or outside the domain of its unit."""
    text = f"{name(metric)} = {quantity(value, unit)}"
    return text if not math.isfinite(value) else f"{text} ({domain(unit)})"
