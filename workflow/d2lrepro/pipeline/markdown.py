"""The claims as a Markdown table (``results/claims.md``), to paste into an issue or a page."""

from __future__ import annotations

import pandas as pd

from d2lrepro.pipeline.claims import claimant

# The table's columns: its header -> the column of claims.csv ("whose" is the ledger's).
COLUMNS = {
    "id": "id",
    "section": "section",
    "whose claim": "whose",
    "book": "printed",
    "this run": "measured",
    "verdict": "verdict",
}


def cell(value) -> str:
    """``value`` as one cell of a table that GitHub renders: on one line, its pipes escaped,
    and its ``<`` written as an entity, so that no text reads as an HTML tag."""
    text = " ".join(str(value).split())
    return text.replace("|", "\\|").replace("<", "&lt;")


def table(ledger: dict, claims: pd.DataFrame) -> str:
    """One row per claim of ``claims`` (claims.csv's rows), in the report's order (its
    sections in the ledger's order, each section's claims in the table's): its id, section,
    whose claim it is (the ledger's label of its source), what the book printed, what this run
    measured, and the verdict."""
    by_id = {c["id"]: c for s in ledger["sections"] for c in s["claims"]}
    order = {s["id"]: i for i, s in enumerate(ledger["sections"])}
    rows = claims.assign(
        whose=[claimant(ledger, by_id[i])[0] for i in claims["id"]],
        at=claims["section"].map(order),
    ).sort_values("at", kind="stable")
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows.to_dict("records"):
        lines.append("| " + " | ".join(cell(row[c]) for c in COLUMNS.values()) + " |")
    return "\n".join(lines) + "\n"
