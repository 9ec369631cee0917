"""The claims ledger (workflow/claims.yaml): loaded and checked against its schema and itself,
and what the report reads of it besides the claims' checks: whose claim each is, the sections'
categories, the evidence and figure files."""

from __future__ import annotations

from pathlib import Path

import jsonschema

from d2lrepro.core import paths
from d2lrepro.pipeline.settings import read_yaml

SCHEMA = paths.CLAIMS_SCHEMA
LEDGER = paths.LEDGER
# A claim's claimed_by where this project makes it beyond the book; every other claim is of
# one of the ledger's sources, and the book's own where that source is of one of BOOKS_OWN.
BEYOND_BOOK = "beyond_book"
BOOKS_OWN = ("book", "library")


def load(path: Path = LEDGER) -> dict:
    ledger = read_yaml(path)
    jsonschema.Draft202012Validator(read_yaml(SCHEMA)).validate(ledger)
    ids = [c["id"] for s in ledger["sections"] for c in s["claims"]]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"{path}: duplicate claim ids {duplicates}")
    unknown = sorted(
        {ref["id"] for s in ledger["sections"] for ref in s["sources"]} - set(ledger["sources"])
    )
    if unknown:
        raise ValueError(f"{path}: sections cite sources {unknown}, not in its sources")
    claimants = {c["claimed_by"] for s in ledger["sections"] for c in s["claims"]}
    unknown = sorted(claimants - set(ledger["sources"]) - {BEYOND_BOOK})
    if unknown:
        raise ValueError(f"{path}: claims are claimed_by {unknown}, not in its sources")
    chapters = sorted({s["chapter"] for s in ledger["sections"]} - set(ledger["chapters"]))
    if chapters:
        raise ValueError(f"{path}: sections name chapters {chapters}, not in its chapters")
    unknown = sorted(
        c["id"]
        for s in ledger["sections"]
        for c in s["claims"]
        if "figure" in c and c["figure"] not in {f["name"] for f in s.get("figures", [])}
    )
    if unknown:
        raise ValueError(f"{path}: claims {unknown} name a figure their section does not draw")
    # A printed output is the same on every machine, and a measurement depends on one.
    odd = [
        c["id"]
        for s in ledger["sections"]
        for c in s["claims"]
        if (c["kind"] == "output") != (c["premise"] == "none")
    ]
    if odd:
        raise ValueError(f"{path}: claims {odd} need premise none exactly where kind is output")
    return ledger


def claimant(ledger: dict, claim: dict) -> tuple[str, bool]:
    """Whose claim ``claim`` is, in the ledger's words ("the book", "the study notes", "beyond
    the book"), and whether it is the book's own."""
    if claim["claimed_by"] == BEYOND_BOOK:
        return "beyond the book", False
    source = ledger["sources"][claim["claimed_by"]]
    return source["label"], source["kind"] in BOOKS_OWN


def whose_words(label: str) -> str:
    """A claim's :func:`claimant` label as its tag in the report: "claimed by the study
    notes", "beyond the book"."""
    return label if label == "beyond the book" else f"claimed by {label}"


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
