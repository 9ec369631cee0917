"""Why a claim that this run did not reproduce differs from the book, where this run measured
the reason: a claim's ``explained_by`` in the ledger names the metrics that bear on it, the
conditions they must meet (checks, judged as a claim's are) and a sentence filled with their
values (or, as {metric!note}, with the note its summary wrote beside it: which setting a
slowest time is). The sentence is shown only where every condition holds on this run's
numbers; else the claim says that this run does not explain the difference. A claim's
``plain`` is a sentence filled the same way, what this run measured in plain words (the
book's units beside ours): shown wherever the run measured every metric it names. Serves
every section.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from d2lrepro.core.results import text
from d2lrepro.pipeline import checks, claims
from d2lrepro.pipeline.scaling import missing_metrics

NOT_EXPLAINED = "not explained by this run"
# {metric}, {metric:format} as in str.format, or {metric!note}; a metric's name may hold dots.
PLACEHOLDER = re.compile(r"\{([^{}:!]+)(!note)?(?::([^{}]*))?\}")


def placeholders(template: str, notes: bool = False) -> list[str]:
    """The metrics ``template`` names; with ``notes``, only those whose note it shows."""
    return [m.group(1) for m in PLACEHOLDER.finditer(template) if not notes or m.group(2)]


def fill(template: str, values: dict[str, float], notes: dict[str, str] | None = None) -> str:
    """``template`` with each placeholder replaced by its metric's value, formatted, or by
    its metric's note (``notes``)."""

    def one(m):
        if m.group(2):
            return notes[m.group(1)]
        return format(values[m.group(1)], m.group(3) or ".3g")

    return PLACEHOLDER.sub(one, template)


def explanation(claim: dict, rows: pd.DataFrame, deviations: list = ()) -> str:
    """The sentence of ``claim``'s ``explained_by`` filled from ``rows`` (the metrics of its
    evidence), where its conditions hold on them; :data:`NOT_EXPLAINED` elsewhere, also where
    the run left out a metric it names by changing a setting the explanation ``depends_on``
    (``deviations``: (key, book value, value) triples). Any other missing metric is an error
    of the ledger or of a summary."""
    spec = claim.get("explained_by")
    if not spec:
        return NOT_EXPLAINED
    evidence = spec.get("evidence", claim["evidence"])
    named = placeholders(spec["because"]) + [
        m for c in spec["checks"] for m in checks.metrics_of(c)
    ]
    where = f"claim {claim['id']}: {evidence}, to explain it,"
    if missing_metrics(named, rows["metric"], spec.get("depends_on", []), deviations, where):
        return NOT_EXPLAINED  # the run did not measure what would explain it
    values = dict(zip(rows["metric"], rows["value"].astype(float)))
    noted = text(rows["note"]) if "note" in rows else [""] * len(rows)
    notes = dict(zip(rows["metric"], noted))
    conditions = {"id": f"{claim['id']}.why", "evidence": evidence, "checks": spec["checks"]}
    held = claims.evaluate_claim(conditions, rows, {})["verdict"] == claims.REPRODUCED
    if not held or not all(math.isfinite(values[m]) for m in placeholders(spec["because"])):
        return NOT_EXPLAINED
    if not all(notes[m] for m in placeholders(spec["because"], notes=True)):
        return NOT_EXPLAINED  # the run noted nothing to name
    return fill(spec["because"], values, notes)


def explain(ledger: dict, table: pd.DataFrame, read_metrics, deviations: list = ()) -> pd.DataFrame:
    """``table`` (claims.csv) with an ``explanation`` of each claim it does not reproduce (an
    inconclusive one differs by no more than its noise: nothing to explain), and of each
    observation of this machine where the run measured why it behaves so;
    ``read_metrics(path)`` returns an evidence file's rows, ``deviations`` are the settings
    the run changed from the book's."""
    by_id = {c["id"]: c for s in ledger["sections"] for c in s["claims"]}
    metrics_of = _cached(read_metrics)

    def why(row) -> str:
        observed = row["verdict"] == claims.OBSERVED
        if row["verdict"] != claims.NOT_REPRODUCED and not observed:
            return ""
        if not observed and not str(row["reason"]).startswith(claims.FAILED_CHECK):
            # The run failed or measured no number: nothing was compared with the book, so
            # nothing the run measured explains a difference.
            return NOT_EXPLAINED
        claim = by_id[row["id"]]
        path = claim.get("explained_by", {}).get("evidence", claim["evidence"])
        said = explanation(claim, metrics_of(path), deviations)
        # An observation of this machine needs no excuse: it says what its numbers show, or
        # nothing.
        return "" if observed and said == NOT_EXPLAINED else said

    return table.assign(explanation=[why(row) for _, row in table.iterrows()])


def _cached(read_metrics):
    """``read_metrics``, reading each evidence file once."""
    cache: dict[str, pd.DataFrame] = {}

    def metrics_of(path: str) -> pd.DataFrame:
        if path not in cache:
            cache[path] = read_metrics(path)
        return cache[path]

    return metrics_of


def ratio(name: str, values: dict[str, float]) -> float:
    """The value a placeholder of a ``plain`` sentence names: a metric's, or for "a / b" the
    ratio of two metrics' (a check's ratio, which no metric holds); NaN where one is missing."""
    parts = [values.get(part.strip(), math.nan) for part in name.split(" / ")]
    if len(parts) == 1:
        return parts[0]
    return parts[0] / parts[1] if len(parts) == 2 and parts[1] else math.nan


def plain_words(template: str, rows: pd.DataFrame) -> str:
    """``template`` (a claim's ``plain``) filled from ``rows`` (the metrics of its evidence),
    a placeholder "{a / b:.2f}" with the ratio of two metrics; "" where a number it names is
    missing or not finite, or a note it shows is empty."""
    measured = dict(zip(rows["metric"], rows["value"].astype(float)))
    notes = dict(zip(rows["metric"], text(rows["note"]))) if "note" in rows else {}
    values = {m: ratio(m, measured) for m in placeholders(template)}
    if not all(math.isfinite(v) for v in values.values()):
        return ""
    if not all(notes.get(m) for m in placeholders(template, notes=True)):
        return ""
    return fill(template, values, notes)


def in_plain_words(ledger: dict, table: pd.DataFrame, read_metrics) -> pd.DataFrame:
    """``table`` (claims.csv) with ``plain``: each claim's ``plain`` sentence filled from this
    run's numbers (:func:`plain_words`), "" where it has none or the run did not measure
    what it names; ``read_metrics(path)`` returns an evidence file's rows."""
    by_id = {c["id"]: c for s in ledger["sections"] for c in s["claims"]}
    metrics_of = _cached(read_metrics)

    def plain(claim: dict) -> str:
        if "plain" not in claim:
            return ""
        return plain_words(claim["plain"], metrics_of(claim["evidence"]))

    return table.assign(plain=[plain(by_id[i]) for i in table["id"]])
