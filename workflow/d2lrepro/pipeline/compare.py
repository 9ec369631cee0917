"""Runs side by side: which claims hold on every machine, which on some, and by how much the
numbers differ.

Reads archives (:mod:`d2lrepro.pipeline.archive`) only, each with its own ledger: runs of other
commits or presets compare too, and are labelled. Every text from an archive reaches the page
through jinja2's autoescape, and the figures' labels through :func:`compare_figures.plain`.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd

from d2lrepro.core import paths
from d2lrepro.pipeline import claims, compare_figures
from d2lrepro.pipeline.archive import Run
from d2lrepro.pipeline.claims import INCONCLUSIVE, NOT_APPLICABLE, NOT_REPRODUCED, REPRODUCED

TEMPLATE = paths.COMPARE_TEMPLATE
DIFFERS = "verdict differs"
SOME_RUNS = "in some runs only"
SAME = "same verdict"
GROUPS = (DIFFERS, SOME_RUNS, SAME)
ABSENT = "not in this run"
VERDICT_CLASS = {
    REPRODUCED: "ok",
    NOT_REPRODUCED: "bad",
    INCONCLUSIVE: "unsure",
    NOT_APPLICABLE: "na",
    ABSENT: "absent",
}
# How an archive written before the inconclusive verdict began the reason of a claim whose
# every failed check sat within its noise, under the verdict "not reproduced".
OLD_WITHIN_NOISE = "failed within the measured noise: "


def read_verdicts(run: Run) -> pd.DataFrame:
    """The run's claims as text, a claim an older archive calls not reproduced within its
    noise read as inconclusive, as a run of this code would call it."""
    claims = run.claims.astype(str)
    reasons = claims["reason"] if "reason" in claims else pd.Series("", index=claims.index)
    old = (claims["verdict"] == NOT_REPRODUCED) & reasons.str.startswith(OLD_WITHIN_NOISE)
    return claims.assign(verdict=claims["verdict"].mask(old, INCONCLUSIVE))


def labels(runs: list[Run]) -> list[str]:
    """A short name per run: its host and day, else (where two runs share them) its archive's
    file name, numbered where those too are the same."""
    names = [f"{r.info.get('host', '?')} {str(r.info.get('date', '?'))[:10]}".strip() for r in runs]
    names = [Path(r.path).stem if names.count(n) > 1 else n for r, n in zip(runs, names)]
    return [f"{n} ({i + 1})" if names.count(n) > 1 else n for i, n in enumerate(names)]


def headline(check: dict, values: dict[str, float]) -> float:
    """The number a check compares with its bound: the ratio of a ratio check, the sum over
    the whole of a sum-of-parts check, the metric of the others; NaN for an ordering, or
    where a metric is missing."""
    kind = check.get("kind")

    def get(metric):
        return values.get(metric, math.nan)

    if kind in compare_figures.RATIO_KINDS:
        den = get(check.get("denominator"))
        return get(check.get("numerator")) / den if den > 0 else math.nan
    if kind == "sum_of_parts":
        whole = get(check.get("whole"))
        return sum(get(p) for p in check.get("parts", [])) / whole if whole > 0 else math.nan
    if kind in ("above", "below", "within", "typical", "exact"):
        return get(check.get("metric"))
    return math.nan


def ledger_claims(ledger: dict) -> dict[str, dict]:
    """The claims of an archive's ledger by id; entries of another shape are skipped (an
    archive's ledger is not trusted to follow the schema)."""
    found = {}
    for section in _listed(ledger.get("sections")):
        for claim in _listed(section.get("claims")) if isinstance(section, dict) else []:
            if isinstance(claim, dict) and _listed(claim.get("checks")):
                found[str(claim.get("id"))] = claim
    return found


def _listed(value) -> list:
    return value if isinstance(value, list) else []


def claim_values(run: Run) -> dict[str, tuple[float, dict]]:
    """Claim id -> (the number its first check compares, that check), from the run's own
    ledger and evidence."""
    values = {}
    evidence: dict[str, dict] = {}
    for claim_id, claim in ledger_claims(run.ledger).items():
        path = str(claim.get("evidence"))
        if path not in evidence:
            table = run.table(path)
            ok = table is not None and {"metric", "value"} <= set(table.columns)
            evidence[path] = (
                dict(zip(table["metric"], pd.to_numeric(table["value"], errors="coerce")))
                if ok
                else {}
            )
        check = claim["checks"][0] if isinstance(claim["checks"][0], dict) else {}
        try:
            value = float(headline(check, evidence[path]))
        except (TypeError, ValueError):
            value = math.nan
        values[claim_id] = (value, check)
    return values


def spread(values: list[float]) -> tuple[float, float]:
    """How far the runs' numbers lie apart: max / min (where all are positive) and max - min,
    over the finite ones; NaN with fewer than two."""
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < 2:
        return math.nan, math.nan
    low, high = min(finite), max(finite)
    return (high / low if low > 0 else math.nan), high - low


def table(runs: list[Run], names: list[str]) -> pd.DataFrame:
    """One row per claim of any run: its group (verdict differs, in some runs only, same
    verdict; in that order, each in ledger order), and per run its verdict, the number its
    first check compares, the measured text and the reason."""
    claims = [read_verdicts(r).drop_duplicates("id").set_index("id", drop=False) for r in runs]
    numbers = [claim_values(r) for r in runs]
    ids = list(dict.fromkeys(i for c in claims for i in c.index))
    rows = []
    for claim_id in ids:
        first = next(c.loc[claim_id] for c in claims if claim_id in c.index)
        row = {
            "id": claim_id,
            "section": first.get("section", ""),
            "kind": first.get("kind", ""),
            "headline": first.get("headline", ""),
            "statement": first.get("statement", ""),
            "printed": first.get("printed", first.get("book", "")),
        }
        verdicts, values = [], []
        for name, c, number in zip(names, claims, numbers):
            held = claim_id in c.index
            value = number.get(claim_id, (math.nan, {}))[0] if held else math.nan
            verdicts.append(c.loc[claim_id, "verdict"] if held else ABSENT)
            values.append(value)
            row |= {
                f"{name}: verdict": verdicts[-1],
                f"{name}: value": value,
                f"{name}: measured": c.loc[claim_id, "measured"] if held else "",
                f"{name}: reason": c.loc[claim_id].get("reason", "") if held else "",
            }
        present = {v for v in verdicts if v != ABSENT}
        row["group"] = DIFFERS if len(present) > 1 else SOME_RUNS if ABSENT in verdicts else SAME
        row["max_over_min"], row["max_minus_min"] = spread(values)
        rows.append(row)
    frame = pd.DataFrame(rows)
    order = frame["group"].map(GROUPS.index)
    return frame.iloc[np.argsort(order.to_numpy(), kind="stable")].reset_index(drop=True)


def environments(runs: list[Run]) -> list[dict]:
    """The runs' set-ups side by side: a row per field, marked where the runs differ."""
    fields = {
        "archive": lambda r, e: Path(r.path).name,
        "host": lambda r, e: r.info.get("host", ""),
        "date": lambda r, e: r.info.get("date", ""),
        "preset": lambda r, e: r.info.get("preset", ""),
        "deviations from the book": lambda r, e: len(r.info.get("deviations") or []),
        "commit": lambda r, e: r.info.get("commit", ""),
        "CPU": lambda r, e: e.get("cpu_model", ""),
        "cores (usable of logical)": lambda r, e: (
            f"{e.get('usable_cores', '?')} of {e.get('logical_cpus', '?')}"
        ),
        "GPUs": lambda r, e: ", ".join(map(str, e.get("gpus") or [])) or "none",
        "CUDA": lambda r, e: e.get("cuda_version") or "none",
        "torch": lambda r, e: e.get("torch_version", ""),
        "Python": lambda r, e: e.get("python_version", ""),
        "platform": lambda r, e: e.get("platform", ""),
    }
    envs = [r.environment for r in runs]
    rows = []
    for field, get in fields.items():
        values = [str(get(r, e)) for r, e in zip(runs, envs)]
        rows.append({"field": field, "values": values, "differs": len(set(values)) > 1})
    return rows


def section_titles(runs: list[Run]) -> dict[str, str]:
    titles = {}
    for run in runs:
        for section in _listed(run.ledger.get("sections")):
            if isinstance(section, dict):
                titles.setdefault(str(section.get("id")), str(section.get("title", "")))
    return titles


def render(
    runs: list[Run],
    book: pd.DataFrame,
    commit: str,
    template: Path = TEMPLATE,
    ledger: dict | None = None,
) -> tuple[str, pd.DataFrame]:
    """The comparison page and its table (compare.csv); the curves drawn are those the
    sections of ``ledger`` (this checkout's, by default) declare."""
    names = labels(runs)
    rows = table(runs, names)
    titles = section_titles(runs)
    read = [read_verdicts(r) for r in runs]
    held = [set(c.loc[c["verdict"] == REPRODUCED, "id"]) for c in read]
    counts = {g: int((rows["group"] == g).sum()) for g in GROUPS}
    counts["reproduced in every run"] = len(set.intersection(*held)) if held else 0
    per_run = [
        {v: int((c["verdict"] == v).sum()) for v in VERDICT_CLASS if v != ABSENT} for c in read
    ]
    numbers = [claim_values(r) for r in runs]
    drawn = compare_figures.families(ledger or claims.load())
    figures = compare_figures.curves(runs, names, book, drawn) + compare_figures.ratios(
        rows, numbers, names, titles
    )
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(template).parent),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    html = env.get_template(Path(template).name).render(
        names=names,
        environments=environments(runs),
        groups=[(g, rows[rows["group"] == g].to_dict("records")) for g in GROUPS],
        titles=titles,
        counts=counts,
        per_run=per_run,
        figures=figures,
        verdict_class=VERDICT_CLASS,
        commit=commit,
        built=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    return html, rows
