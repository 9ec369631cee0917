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


def _hits(depends_on: list[str], deviations: list) -> list:
    """The deviations of settings a claim ``depends_on`` (a key or one under it)."""
    return [
        d
        for d in deviations
        if any(d[0] == key or d[0].startswith(key + ".") for key in depends_on)
    ]


def names_left_out(metric: str, depends_on: list[str], deviations: list) -> bool:
    """Whether ``metric`` names something a preset left out of a setting the claim depends
    on: a run it mapped to null (``data_parallel.runs.resnet18_b256.2`` in
    ``resnet18_b256.2.test_acc``) or a value it dropped from a list (``intended`` of
    ``lr_schedules.semantics`` in ``multistep.intended.test_acc``), as whole dotted parts."""
    names = set()
    for key, book, value in _hits(depends_on, deviations):
        if value == LEFT_OUT:
            parts = key.split(".")
            names |= {".".join(parts[i:]) for i in range(1, len(parts)) if not parts[i].isdigit()}
        elif isinstance(book, list) and isinstance(value, list):
            names |= {v for v in book if isinstance(v, str) and v not in value}
    return any(f".{name}." in f".{metric}." for name in names)


def scaled_reason(depends_on: list[str], deviations: list, preset: str, seconds: dict) -> str:
    """Why a claim is judged only at the book's scale, when the preset changed a setting it
    depends on ("" when it changed none): what was scaled or left out, and how long the
    book's settings would take here, from the ``seconds`` this run's jobs of each family took
    and the work factor of that family's own settings (families add up), or else how much
    more work; a run left out was not timed, so nothing is estimated."""
    hits = _hits(depends_on, deviations)
    if not hits:
        return ""
    scaled = [f"{k} = {v} (book: {'all' if b is None else b})" for k, b, v in hits if v != LEFT_OUT]
    left_out = [k for k, _, v in hits if v == LEFT_OUT]
    changes = [f"scaled {', '.join(scaled)}"] * bool(scaled) + [
        f"left out {', '.join(left_out)}"
    ] * bool(left_out)
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
    if not scaled:  # only left out: nothing ran that an estimate could scale
        more = ""
    elif spent and book > spent:
        more = (
            f"; the book's settings would take at most about {_minutes(book)} of job time"
            f" here, one job at a time (this run's {_minutes(spent)} scaled linearly, its"
            " start-up costs too)"
        )
    elif factor > 1:
        more = f"; the book's settings are about {factor:.3g}x this run's work"
    elif factor < 1:  # more seeds or settings than the book's: not a scaled-down run
        more = f"; this preset does about {1 / factor:.3g}x the work of the book's settings"
    elif spent:
        more = (
            f"; this run's jobs of it took {_minutes(spent)}, the book's settings do more work"
            " (how much more is not estimated)"
        )
    else:
        more = ""
    if left_out:
        gone = ", ".join(left_out)
        more += (
            f"; no job of this run ran {gone}, so that estimate leaves it out"
            if more
            else f"; no job of this run ran {gone}, so its book-scale time is not estimated"
        )
    return (
        f"{SCALED_REASON}: preset {preset} "
        + " and ".join(changes)
        + more
        + " (run with --config preset=book to judge it)"
    )
