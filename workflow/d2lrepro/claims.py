"""Claims as data: load the ledger, evaluate every claim against this run's measurements.

A verdict is always computed here from measured numbers; book values are only displayed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pandas as pd
import yaml

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "claims.schema.yaml"
LEDGER = Path(__file__).resolve().parents[1] / "claims.yaml"

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_APPLICABLE = "not applicable here"
COLUMNS = [
    "id",
    "section",
    "statement",
    "book",
    "measured",
    "verdict",
    "reason",
    "device",
    "evidence",
]


def load(path: Path = LEDGER) -> dict:
    ledger = yaml.safe_load(Path(path).read_text())
    jsonschema.Draft202012Validator(yaml.safe_load(SCHEMA.read_text())).validate(ledger)
    ids = [c["id"] for s in ledger["sections"] for c in s["claims"]]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"{path}: duplicate claim ids {duplicates}")
    return ledger


def evidence_files(ledger: dict) -> list[str]:
    return sorted({c["evidence"] for s in ledger["sections"] for c in s["claims"]})


def figure_files(ledger: dict) -> list[str]:
    return [f["file"] for s in ledger["sections"] for f in s.get("figures", [])]


@dataclass
class Outcome:
    measured: str
    passed: bool


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _check(check: dict, value, name=lambda m: m) -> Outcome:
    """Apply one check; ``value(metric)`` returns a measured metric, ``name(metric)`` its label."""
    kind = check["kind"]
    if kind in ("above", "below"):
        v, bound = value(check["metric"]), check["bound"]
        passed = v > bound if kind == "above" else v < bound
        sign = ">" if kind == "above" else "<"
        return Outcome(f"{name(check['metric'])} = {_fmt(v)} (needs {sign} {_fmt(bound)})", passed)
    if kind == "within":
        v, target, tol = value(check["metric"]), check["target"], check["tol"]
        scale = abs(target) if check.get("relative") else 1.0
        what = f"{tol:.0%} of" if check.get("relative") else f"± {_fmt(tol)} of"
        return Outcome(
            f"{name(check['metric'])} = {_fmt(v)} (needs {what} {_fmt(target)})",
            abs(v - target) <= tol * scale,
        )
    if kind in ("ratio_above", "ratio_below"):
        n, d, bound = value(check["numerator"]), value(check["denominator"]), check["bound"]
        ratio = n / d if d else math.inf
        passed = ratio > bound if kind == "ratio_above" else ratio < bound
        sign = ">" if kind == "ratio_above" else "<"
        return Outcome(
            f"{name(check['numerator'])} / {name(check['denominator'])} = {_fmt(n)} / {_fmt(d)}"
            f" = {ratio:.3g} (needs {sign} {_fmt(bound)})",
            passed,
        )
    if kind == "sum_of_parts":
        whole, parts = value(check["whole"]), [value(p) for p in check["parts"]]
        return Outcome(
            f"{name(check['whole'])} = {_fmt(whole)} (needs < sum of parts "
            f"{' + '.join(_fmt(p) for p in parts)} = {_fmt(sum(parts))})",
            whole < sum(parts),
        )
    if kind == "exact":
        v, decimals = value(check["metric"]), check.get("decimals", 6)
        shown, expected = f"{v:.{decimals}f}", f"{check['expected']:.{decimals}f}"
        rounded = "" if float(shown) == v else f" → {shown}"
        return Outcome(
            f"{name(check['metric'])} = {_fmt(v)}{rounded}"
            f" (needs {expected} to {decimals} decimals)",
            shown == expected,
        )
    if kind == "ordering":
        vs = [value(m) for m in check["metrics"]]
        increasing = check["order"] == "increasing"
        passed = all(a < b if increasing else a > b for a, b in zip(vs, vs[1:]))
        sign = " < " if increasing else " > "
        return Outcome(
            sign.join(f"{name(m)} = {_fmt(v)}" for m, v in zip(check["metrics"], vs))
            + " (needs this order)",
            passed,
        )
    raise ValueError(f"unknown check kind {kind!r}")


def _metrics_of(check: dict) -> list[str]:
    names = [check.get(k) for k in ("metric", "numerator", "denominator", "whole")]
    return [n for n in names if n] + check.get("parts", []) + check.get("metrics", [])


def _unmet(requires: dict, environment: dict) -> str:
    """Why the machine that ``environment`` describes lacks what a claim ``requires``."""
    from .devices import unavailable  # imports torch: only when evaluating, not when parsing

    return unavailable(
        cuda=requires.get("cuda_devices", 0),
        have_cuda=environment.get("cuda_devices", 0),
        cores=environment.get("usable_cores", 1),
    )


def evaluate_claim(claim: dict, metrics: pd.DataFrame, environment: dict) -> dict:
    """One row of claims.csv for ``claim``, given the rows of its evidence file."""
    row = {k: claim.get(k, "") for k in ("id", "statement", "book", "evidence")}
    names = [n for check in claim["checks"] for n in _metrics_of(check)]
    missing = sorted(set(names) - set(metrics["metric"]))
    if missing:
        raise KeyError(f"claim {claim['id']}: {claim['evidence']} has no metric {missing}")
    used = metrics[metrics["metric"].isin(names)]
    if used["metric"].duplicated().any():
        raise ValueError(f"claim {claim['id']}: {claim['evidence']} holds a metric more than once")
    row["device"] = ", ".join(sorted(set(used["device"].fillna("").astype(str)) - {""}))

    unmet = _unmet(claim.get("requires", {}), environment)
    unmeasured = used[used["value"].isna()]
    if unmet or len(unmeasured):
        reason = unmet or "; ".join(
            sorted(set(unmeasured["note"].fillna("not measured").astype(str)))
        )
        return row | {"measured": "", "verdict": NOT_APPLICABLE, "reason": reason}

    values = dict(zip(used["metric"], used["value"].astype(float)))
    # Metric names often repeat the claim's id; the table is easier to read without it.
    prefix = claim["id"] + "."

    def name(metric):
        return metric.removeprefix(prefix)

    outcomes = [_check(check, values.__getitem__, name) for check in claim["checks"]]
    failed = [o.measured for o in outcomes if not o.passed]
    return row | {
        "measured": "; ".join(o.measured for o in outcomes),
        "verdict": NOT_REPRODUCED if failed else REPRODUCED,
        "reason": ("failed: " + "; ".join(failed)) if failed else "",
    }


def evaluate(ledger: dict, read_metrics, environment: dict) -> pd.DataFrame:
    """All claims of the ledger; ``read_metrics(path)`` returns an evidence file's rows."""
    cache: dict[str, pd.DataFrame] = {}
    rows = []
    for section in ledger["sections"]:
        for claim in section["claims"]:
            path = claim["evidence"]
            if path not in cache:
                cache[path] = read_metrics(path)
            rows.append(
                {"section": section["id"]} | evaluate_claim(claim, cache[path], environment)
            )
    return pd.DataFrame(rows, columns=COLUMNS)
