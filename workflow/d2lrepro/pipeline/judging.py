"""What would judge the claims this run could not: one row per thing they lack (a CUDA GPU,
several GPUs or devices, the book's scale, timings taken alone), with how many claims, the
command that judges them, and how long it takes. The book's scale is timed from this run's
own training rates (each family of runs counted once, :func:`~d2lrepro.pipeline.scaling.
book_total`); a GPU machine's run from the measured times of ``docs/timings.md``, the
latest of each preset and machine, or said to be unknown where it has none. A results tree
keeps its preset, so another preset runs in a tree of its own, beside this one.
"""

from __future__ import annotations

import json
import re

from d2lrepro.pipeline.findings import folded
from d2lrepro.pipeline.scaling import book_total, duration

# Where docs/timings.md is cited from the report.
TIMINGS_DOC = "docs/timings.md"
SNAKEMAKE = ".venv/bin/snakemake"


def other_tree(preset: str = "") -> str:
    """The command that runs ``preset`` (the ``auto`` preset where none) in a new results
    tree beside this checkout's: a git worktree of the same commit, with this checkout's
    virtual environment; this tree and its preset stay as they are."""
    name = f"../d2l-{preset or 'alone'}"
    config = f" --config preset={preset}" if preset else ""
    return (
        f'git worktree add --detach {name} && cd {name} && "$OLDPWD/{SNAKEMAKE}" --cores all'
        + config
    )


def on_gpus(n: int) -> str:
    """The command that runs the workflow on ``n`` GPUs of a machine that has them."""
    return f"CUDA_VISIBLE_DEVICES={','.join(map(str, range(n)))} {SNAKEMAKE} --cores all"


def timing_rows(markdown: str) -> list[dict]:
    """The rows of the table of measured times in ``docs/timings.md``: date, machine, commit,
    what, time, result, as written there (markdown, backticks and bold marks removed)."""
    rows = []
    for line in markdown.splitlines():
        cells = [c.strip().replace("`", "").replace("**", "") for c in line.strip("| ").split("|")]
        if len(cells) == 6 and re.fullmatch(r"\d{4}-\d\d-\d\d", cells[0]):
            rows.append(dict(zip(("date", "machine", "commit", "what", "time", "result"), cells)))
    return rows


def gpus_of(machine: str) -> int:
    """The GPUs a row's machine had ("1 × NVIDIA H200, ...": 1; "no GPU": 0)."""
    found = re.search(r"(\d+) × NVIDIA", machine)
    return int(found.group(1)) if found else 0


def reference(rows: list[dict], preset: str, gpus: int) -> str:
    """How long ``preset`` took (or is estimated to take) on a machine with ``gpus`` GPUs
    (without a GPU where 0; at least that many otherwise), from the first whole run of it
    that ``rows`` (:func:`timing_rows`) record; "" where they record none."""
    for row in rows:
        whole = row["what"].startswith(f"{preset} preset") and "stopped" not in row["what"]
        fits = gpus_of(row["machine"]) >= gpus if gpus else not gpus_of(row["machine"])
        if whole and fits:
            how = "estimated" if "estimate" in row["what"] + row["machine"] else "measured"
            where = row["machine"].removeprefix("for ").split(", estimated")[0]
            return (
                f"{row['time']}, {how} for the {preset} preset on {where}"
                f" ({TIMINGS_DOC}, {row['date']}, commit {row['commit']})"
            )
    return ""


def _gpus(why: str) -> int:
    """The GPUs a group of missing hardware asks for ("need a GPU": 1, "need 2 GPUs" or
    "need 2 devices": 2); 0 for any other group."""
    if why == "need a GPU":
        return 1
    found = re.fullmatch(r"need (\d+) (GPUs|devices)", why)
    return int(found.group(1)) if found else 0


def _scale_time(members: list[dict]) -> str:
    """How long training at the book's settings would take here for the claims ``members``
    (claims.csv's rows), each family of runs counted once."""
    seconds = book_total([json.loads(r.get("book_scale_s") or "{}") for r in members])
    if not seconds:
        return "not estimated: no run these claims depend on trained in this run"
    return (
        f"about {duration(seconds)} of training, one run after another, at this run's rates after"
        " start-up (each run counted once; start-up, testing and the preset's other jobs"
        " not counted)"
    )


def judging(rows: list[dict], preset: str, timings: list[dict], gpus_here: int) -> list[dict]:
    """One row per reason the claims of ``rows`` (claims.csv's records) are not applicable
    here, hardware first: ``{"missing", "why", "ids", "command", "where", "time"}``.
    ``timings``: :func:`timing_rows`; ``gpus_here``: the most GPUs this run's jobs could
    use."""
    table = []
    for group in folded(rows, preset):
        why, members = group["why"], group["rows"]
        gpus = _gpus(why)
        if gpus:
            kind = "GPUs" if gpus > 1 else "a CUDA GPU"
            missing = f"{gpus} {kind}" if gpus > 1 else kind
            command, where = on_gpus(gpus), f"in a checkout on a machine with {missing}"
            time = reference(timings, "book", gpus) or (
                f"unknown: {TIMINGS_DOC} records no run on {gpus} GPUs"
            )
        elif why.startswith("scaled by"):
            missing, command = "the book's scale", other_tree("book")
            where, time = "beside this checkout", _scale_time(members)
        elif why == "timed beside other jobs":
            alone = "book" if gpus_here else "cpu"
            missing, command = "timings taken with no other job beside them", other_tree()
            where = f"beside this checkout (the auto preset: {alone} on this machine)"
            time = reference(timings, alone, gpus_here) or f"unknown: {TIMINGS_DOC} has none"
        elif cores := re.fullmatch(r"need (\d+) CPU cores", why):
            missing, command = f"{cores.group(1)} CPU cores", f"{SNAKEMAKE} --cores all"
            where = f"in a checkout on a machine with {missing}"
            time = reference(timings, preset, 0) or f"unknown: {TIMINGS_DOC} has none"
        else:
            missing, command, where, time = why, "", "", ""
        row = {"missing": missing, "why": why, "ids": [r["id"] for r in members]}
        table.append(
            (
                (not gpus, gpus, not command),
                row | {"command": command, "where": where, "time": time},
            )
        )
    # Missing hardware first, fewest GPUs first; reasons no command cures last.
    return [row for _, row in sorted(table, key=lambda t: t[0])]
