"""Claims judged at the book's scale only: what a preset scaled that a claim depends on, and how
long the book's settings would take on this machine, from this run's job times."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from d2lrepro.pipeline.settings import LEFT_OUT

SCALED_REASON = "judged at the book's scale only"

# Settings whose ratio says how much more work the book's run is (None: the full data set);
# a list setting (seeds, lrs) scales the work by its length.
WORK_SETTINGS = {"epochs": None, "train_subset": 60_000}


def job_seconds(files: dict[str, list[str]]) -> dict[str, float]:
    """Wall seconds this run's jobs took, by the setting they ran: ``files`` maps a config key
    to the benchmark files of the jobs that ran it (those missing are skipped)."""
    seconds = {}
    for key, job_files in files.items():
        found = [Path(p) for p in job_files if Path(p).exists()]
        if found:
            seconds[key] = sum(float(pd.read_csv(f, sep="\t")["s"].iloc[-1]) for f in found)
    return seconds


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _work_factor(deviations: list) -> float:
    """How many times this run's work the book's values of ``deviations`` are."""
    factor = 1.0
    for key, book, value in deviations:
        setting = key.rsplit(".", 1)[-1]
        full = WORK_SETTINGS.get(setting) if book is None else book
        if isinstance(full, list) and isinstance(value, list) and value:
            factor *= len(full) / len(value)
        elif setting in WORK_SETTINGS and isinstance(full, int | float):
            factor *= full / value if isinstance(value, int | float) and value > 0 else 1.0
    return factor


def _under(key: str, family: str) -> bool:
    """Whether setting ``key`` shapes the jobs of ``family`` (a config key): it lies under the
    family, or it is a setting of a section the family belongs to."""
    parent = key.rsplit(".", 1)[0]
    return key.startswith(family + ".") or family == parent or family.startswith(parent + ".")


def scaled_reason(depends_on: list[str], deviations: list, preset: str, seconds: dict) -> str:
    """Why a claim is judged only at the book's scale, when the preset changed a setting it
    depends on ("" when it changed none): what was scaled, and how long the book's settings
    would take here, from the ``seconds`` this run's jobs of each family took and the work
    factor of that family's own settings (families add up), or else how much more work."""
    hits = [
        d
        for d in deviations
        if any(d[0] == key or d[0].startswith(key + ".") for key in depends_on)
    ]
    if not hits:
        return ""
    parts = [
        f"{k} {LEFT_OUT}" if v == LEFT_OUT else f"{k} = {v} (book: {'all' if b is None else b})"
        for k, b, v in hits
    ]
    matched = [
        f
        for f in seconds
        if any(f == d or d.startswith(f + ".") or f.startswith(d + ".") for d in depends_on)
    ]
    # A family whose own part also matched (airfoil beside airfoil.eps_sweep) runs other jobs.
    families = [f for f in matched if not any(g.startswith(f + ".") for g in matched)]
    spent = sum(seconds[f] for f in families)
    book = sum(seconds[f] * _work_factor([h for h in hits if _under(h[0], f)]) for f in families)
    factor = _work_factor(hits)
    if spent and book > spent:
        more = (
            f"; the book's settings would take at most about {_minutes(book)} of job time"
            f" here, one job at a time (this run's {_minutes(spent)} scaled linearly, its"
            " start-up costs too)"
        )
    elif factor > 1:
        more = f"; the book's settings are about {factor:.3g}x this run's work"
    elif spent:
        more = (
            f"; this run's jobs of it took {_minutes(spent)}, the book's settings do more work"
            " (how much more is not estimated)"
        )
    else:
        more = ""
    return (
        f"{SCALED_REASON}: preset {preset} scaled "
        + ", ".join(parts)
        + more
        + " (run with --config preset=book to judge it)"
    )
