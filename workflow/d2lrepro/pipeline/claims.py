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

from d2lrepro.core import machines, paths
from d2lrepro.pipeline.scaling import scaled_reason

SCHEMA = paths.CLAIMS_SCHEMA
LEDGER = paths.LEDGER

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_APPLICABLE = "not applicable here"
COLUMNS = [
    "id",
    "section",
    "kind",
    "headline",
    "statement",
    "printed",
    "printed_en",
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
    unknown = sorted(
        {ref["id"] for s in ledger["sections"] for ref in s["sources"]} - set(ledger["sources"])
    )
    if unknown:
        raise ValueError(f"{path}: sections cite sources {unknown}, not in its sources")
    chapters = sorted({s["chapter"] for s in ledger["sections"]} - set(ledger["chapters"]))
    if chapters:
        raise ValueError(f"{path}: sections name chapters {chapters}, not in its chapters")
    return ledger


def section_categories(ledger: dict) -> dict[str, str]:
    """Section id -> its category in `snakemake --report`, numbered in the book's order. The
    report sorts categories as text, so the numbers are zero-padded to one width ("09." before
    "10."); "0. Claims" comes first."""
    sections = ledger["sections"]
    width = max(2, len(str(len(sections))))
    return {s["id"]: f"{i:0{width}d}. {s['title']}" for i, s in enumerate(sections, 1)}


def evidence_files(ledger: dict) -> list[str]:
    """The result files the claims are judged on, and those their explanations read."""
    claims = [c for s in ledger["sections"] for c in s["claims"]]
    explained = [c["explained_by"].get("evidence") for c in claims if "explained_by" in c]
    return sorted({c["evidence"] for c in claims} | set(filter(None, explained)))


def figure_files(ledger: dict) -> list[str]:
    """The files of the ledger's figures, in its order: each is named within its section."""
    return [
        str(paths.figure(s["id"], f["name"]))
        for s in ledger["sections"]
        for f in s.get("figures", [])
    ]


@dataclass
class Outcome:
    measured: str
    passed: bool


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _check(check: dict, value, name=lambda m: m) -> Outcome:
    """Apply one check; ``value(metric)`` returns a measured metric, ``name(metric)`` its label.

    With ``spread`` (metric -> the metric of its IQR), a comparison holds only if it also holds
    between the pessimistic ends of the measured spreads (median -+ IQR / 2); a difference
    smaller than the noise does not reproduce a claim.
    """
    kind, spread = check["kind"], check.get("spread", {})

    def half(metric):
        return value(spread[metric]) / 2 if metric in spread else 0.0

    def noisy(text, point, margin):
        if point and not margin:
            return Outcome(f"{text}, within the measured spread (median ± IQR/2)", False)
        return Outcome(text, point and margin)

    if kind in ("above", "below"):
        m = check["metric"]
        v, bound, h = value(m), check["bound"], half(m)
        sign = ">" if kind == "above" else "<"
        point = v > bound if kind == "above" else v < bound
        margin = v - h > bound if kind == "above" else v + h < bound
        return noisy(f"{name(m)} = {_fmt(v)} (needs {sign} {_fmt(bound)})", point, margin)
    if kind == "within":
        v, target, tol = value(check["metric"]), check["target"], check["tol"]
        scale = abs(target) if check.get("relative") else 1.0
        what = f"{tol:.0%} of" if check.get("relative") else f"± {_fmt(tol)} of"
        return Outcome(
            f"{name(check['metric'])} = {_fmt(v)} (needs {what} {_fmt(target)})",
            abs(v - target) <= tol * scale,
        )
    if kind in ("ratio_above", "ratio_below"):
        num, den = check["numerator"], check["denominator"]
        n, d, bound = value(num), value(den), check["bound"]
        sign = ">" if kind == "ratio_above" else "<"
        text = f"{name(num)} / {name(den)} = {_fmt(n)} / {_fmt(d)}"
        if d <= 0:  # a time or size of zero is a broken measurement, not an infinite ratio
            return Outcome(
                f"{text}: the denominator is not positive (needs {sign} {_fmt(bound)})", False
            )
        if kind == "ratio_above":
            point, margin = n / d > bound, (n - half(num)) / (d + half(den)) > bound
        else:
            low = d - half(den)  # the noise may reach zero: then the ratio is not bounded
            point, margin = n / d < bound, low > 0 and (n + half(num)) / low < bound
        return noisy(f"{text} = {n / d:.3g} (needs {sign} {_fmt(bound)})", point, margin)
    if kind == "sum_of_parts":
        whole, parts = value(check["whole"]), [value(p) for p in check["parts"]]
        bound, total = check.get("bound", 1), sum(parts)
        text = (
            f"{name(check['whole'])} = {_fmt(whole)}, sum of parts "
            f"{' + '.join(_fmt(p) for p in parts)} = {_fmt(total)}"
        )
        if whole <= 0:
            return Outcome(f"{text}: the whole is not positive", False)
        needs = "needs whole < sum" if bound == 1 else f"needs sum / whole > {_fmt(bound)}"
        low = sum(value(p) - half(p) for p in check["parts"])
        return noisy(
            f"{text}, sum / whole = {total / whole:.3g} ({needs})",
            total / whole > bound,
            low / (whole + half(check["whole"])) > bound,
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
        ms = check["metrics"]
        vs = [value(m) for m in ms]
        increasing = check["order"] == "increasing"
        pairs = list(zip(ms, ms[1:]))
        if increasing:
            point = all(value(a) < value(b) for a, b in pairs)
            margin = all(value(a) + half(a) < value(b) - half(b) for a, b in pairs)
        else:
            point = all(value(a) > value(b) for a, b in pairs)
            margin = all(value(a) - half(a) > value(b) + half(b) for a, b in pairs)
        sign = " < " if increasing else " > "
        text = sign.join(f"{name(m)} = {_fmt(v)}" for m, v in zip(ms, vs))
        return noisy(text + " (needs this order)", point, margin)
    raise ValueError(f"unknown check kind {kind!r}")


def _metrics_of(check: dict) -> list[str]:
    names = [check.get(k) for k in ("metric", "numerator", "denominator", "whole")]
    names = [n for n in names if n] + check.get("parts", []) + check.get("metrics", [])
    return names + list(check.get("spread", {}).values())


def _unmet(requires: dict, records: list[dict]) -> str:
    """Why the machines that measured a claim's numbers (``records``, as each job saw its
    machine) lack what the claim ``requires``; "" when each has it."""
    from d2lrepro.core.devices import (
        unavailable,  # imports torch: only when evaluating, not when parsing
    )

    reasons = []
    for record in records:
        on = f" (on {record['host']})" if record.get("host") else ""
        has = f"the job that measured it{on} could use"
        cores, have = requires.get("cores", 0), record["usable_cores"]
        if cores > have:
            reasons.append(f"needs {cores} CPU cores, {has} {have}")
            continue
        reasons.append(
            unavailable(
                cuda=requires.get("cuda_devices", 0),
                have_cuda=record["cuda_devices"],
                cores=have,
                has=has,
            )
        )
    return "; ".join(dict.fromkeys(r for r in reasons if r))


def _notes(rows: pd.DataFrame) -> str:
    return "; ".join(sorted(set(rows["note"].fillna("").astype(str)) - {""})) or "no note"


def evaluate_claim(
    claim: dict,
    metrics: pd.DataFrame,
    records: dict[str, dict],
    deviations: list = (),
    preset: str = "book",
    seconds: dict | None = None,
) -> dict:
    """One row of claims.csv for ``claim``, given the rows of its evidence file and the
    records of the machines they name (:mod:`d2lrepro.core.machines`), the settings
    the preset changed (``deviations``: (key, book value, value) triples) and the seconds this
    run's jobs took by setting (:func:`job_seconds`).

    "not applicable here": the machine lacks the hardware, cannot measure a metric, or the
    preset scaled a setting the claim depends on. "not reproduced": a check failed, or the run
    behind a metric diverged, failed or measured nothing. The measured numbers are shown
    whenever there are any.
    """
    row = {
        k: claim.get(k, "")
        for k in ("id", "kind", "headline", "statement", "printed", "printed_en", "evidence")
    }
    names = [n for check in claim["checks"] for n in _metrics_of(check)]
    missing = sorted(set(names) - set(metrics["metric"]))
    if missing:
        raise KeyError(f"claim {claim['id']}: {claim['evidence']} has no metric {missing}")
    used = metrics[metrics["metric"].isin(names)]
    if used["metric"].duplicated().any():
        raise ValueError(f"claim {claim['id']}: {claim['evidence']} holds a metric more than once")
    row["device"] = ", ".join(sorted(set(used["device"].fillna("").astype(str)) - {""}))
    status = used["status"].fillna("") if "status" in used else pd.Series("", index=used.index)
    values = dict(zip(used["metric"], used["value"].astype(float)))
    prefix = claim["id"] + "."  # metric names often repeat the claim's id

    def name(metric):
        return metric.removeprefix(prefix)

    # A metric without a finite number (NaN, or ±inf from a broken measurement) is never judged.
    broken = sorted(m for m, v in values.items() if not math.isfinite(v))
    outcomes = []
    if not broken:
        outcomes = [_check(check, values.__getitem__, name) for check in claim["checks"]]
    measured = "; ".join(o.measured for o in outcomes) or "; ".join(
        f"{name(m)} = {_fmt(v)}" for m, v in values.items() if math.isfinite(v)
    )

    def verdict(kind, reason):
        return row | {"measured": measured, "verdict": kind, "reason": reason}

    requires = claim.get("requires", {})
    unmet = requires and _unmet(requires, machines.records_of(used, records, claim["evidence"]))
    if unmet:
        return verdict(NOT_APPLICABLE, unmet)
    failed_rows = used[status == "failed"]
    scaled = scaled_reason(claim.get("depends_on", []), list(deviations), preset, seconds or {})
    if len(failed_rows):
        # A run that failed is a finding even when the preset scaled it: a smaller run that
        # crashes or diverges says something is wrong, and the scale is named beside it.
        also = f" (this run was scaled: {scaled})" if scaled else ""
        return verdict(NOT_REPRODUCED, f"the run failed: {_notes(failed_rows)}{also}")
    if scaled:
        return verdict(NOT_APPLICABLE, scaled)
    not_here = used[status == "not applicable"]
    if len(not_here):
        return verdict(NOT_APPLICABLE, _notes(not_here))
    if broken:
        shown = ", ".join(f"{m} ({values[m]})" for m in broken)
        return verdict(NOT_REPRODUCED, "no number was measured: " + shown)
    failed = [o.measured for o in outcomes if not o.passed]
    if not failed:
        return verdict(REPRODUCED, "")
    # What the measurement itself noted (e.g. why two numbers are equal) explains the finding.
    noted = used[used["note"].fillna("").astype(str) != ""] if "note" in used else used[:0]
    why = f"; note: {_notes(noted)}" if len(noted) else ""
    return verdict(NOT_REPRODUCED, "failed: " + "; ".join(failed) + why)


def evaluate(
    ledger: dict,
    read_metrics,
    read_machines,
    deviations: list = (),
    preset: str = "book",
    seconds: dict | None = None,
) -> pd.DataFrame:
    """All claims of the ledger; ``read_metrics(path)`` returns an evidence file's rows,
    ``read_machines(path)`` the records of the machines that measured them."""
    cache: dict[str, pd.DataFrame] = {}
    records: dict[str, dict] = {}
    rows = []
    for section in ledger["sections"]:
        for claim in section["claims"]:
            path = claim["evidence"]
            if path not in cache:
                cache[path], records[path] = read_metrics(path), read_machines(path)
            rows.append(
                {"section": section["id"]}
                | evaluate_claim(claim, cache[path], records[path], deviations, preset, seconds)
            )
    return pd.DataFrame(rows, columns=COLUMNS)
