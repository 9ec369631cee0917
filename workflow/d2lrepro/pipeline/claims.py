"""Claims as data: evaluate every claim of the ledger (:mod:`.ledger`) against this run's
measurements.

A verdict is always computed here from measured numbers; book values are only displayed.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from d2lrepro.core import provenance, shortfall
from d2lrepro.core.results import FAILED, outside_domain, text
from d2lrepro.core.results import NOT_APPLICABLE as NOT_APPLICABLE_STATUS
from d2lrepro.pipeline import checks, evidence, scaling

# The ledger's own reading, named here as its callers name it (claims.load, claims.claimant).
from d2lrepro.pipeline.ledger import BEYOND_BOOK as BEYOND_BOOK
from d2lrepro.pipeline.ledger import BOOKS_OWN as BOOKS_OWN
from d2lrepro.pipeline.ledger import LEDGER as LEDGER
from d2lrepro.pipeline.ledger import SCHEMA as SCHEMA
from d2lrepro.pipeline.ledger import claimant as claimant
from d2lrepro.pipeline.ledger import evidence_files as evidence_files
from d2lrepro.pipeline.ledger import figure_files as figure_files
from d2lrepro.pipeline.ledger import load as load
from d2lrepro.pipeline.ledger import section_categories as section_categories
from d2lrepro.pipeline.ledger import whose_words as whose_words

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
# Every check that failed sat within its measured spread: this run cannot tell, and is no
# evidence against the book (another run of the same code may fall on either side).
INCONCLUSIVE = "inconclusive here"
NOT_APPLICABLE = "not applicable here"
# A claim about GPUs measured on other devices (CPU cores standing in for GPUs): what the run
# measured describes this machine, and says nothing for or against the book.
OBSERVED = "observed on this machine"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, OBSERVED, NOT_APPLICABLE)
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
    "scale",
    "device",
    "hosts",
    "evidence",
    "book_scale_s",
]


def _unmet(requires: dict, records: list[dict]) -> str:
    """Why the machines that measured a claim's numbers (``records``, as each job saw them)
    lack what it ``requires``; "" when one has it (a speed-up's 1-device job locked one GPU)."""
    reasons = [
        shortfall.reason(
            cuda=requires.get("cuda_devices", 0),
            have_cuda=record["cuda_devices"],
            cores=record["usable_cores"],
            need_cores=requires.get("cores", 0),
            host=record.get("host", ""),
        )
        for record in records
    ]
    return "" if not all(reasons) else "; ".join(dict.fromkeys(reasons))


def _lacking(rows: pd.DataFrame, status: pd.Series) -> pd.DataFrame:
    """The ``rows`` not measured because the job lacked hardware, as their notes say."""
    if "note" not in rows:  # then no row has a status (evidence.statuses)
        return rows[:0]
    lacks = rows["note"].map(lambda note: isinstance(note, str) and bool(shortfall.group(note)))
    return rows[(status == NOT_APPLICABLE_STATUS) & lacks]


# How the reason of a claim that did not reproduce begins where a check failed.
FAILED_CHECK = "failed: "
# A job that times shares the machine only where the preset allows it (timings_alone: false),
# or where its plan found that no claim could judge its time (common.smk's unjudged_time).
RAN_BESIDE_OTHERS = (
    "timed by a job that ran beside other jobs (timings_alone: false, or planned so where no"
    " claim could judge its time); a run whose timings run alone (timings_alone: true, as in"
    " the book and cpu presets, on the devices the claim needs) judges it"
)


def _ran_beside_others(rows: pd.DataFrame, records: dict[str, dict]) -> bool:
    """Whether a job that times measured any of ``rows`` beside other jobs, as its machine's
    record says."""
    ids = provenance.ids_of(provenance.of_frame(rows))
    return any(records.get(i, {}).get("ran_alone") is False for i in ids)


def _notes(rows: pd.DataFrame) -> str:
    return "; ".join(sorted(set(text(rows["note"])) - {""})) or "no note"


def _used(claim: dict, metrics: pd.DataFrame, depends_on: list, deviations: list):
    """The rows of ``metrics`` that ``claim``'s checks read, and the metrics missing there.

    A metric may be missing only where it names what the preset left out of a setting the
    claim depends on (a run, a semantics); otherwise the ledger or a summary is broken."""
    names = [n for check in claim["checks"] for n in checks.metrics_of(check)]
    where = f"claim {claim['id']}: {claim['evidence']}"
    missing = scaling.missing_metrics(names, metrics["metric"], depends_on, deviations, where)
    used = metrics[metrics["metric"].isin(names)]
    if used["metric"].duplicated().any():
        raise ValueError(f"claim {claim['id']}: {claim['evidence']} holds a metric more than once")
    return used, missing


def _broken(claim: dict, values: dict, units: dict, measured_here: set) -> list[str]:
    """The metrics measured here whose number is none: NaN or ±inf, or a finite number outside
    its unit's domain (a time of 0 s; a spread may be 0, or +inf where a ratio's denominator may
    reach 0: checks read it as noise). Metrics not measured are judged by their status."""
    spreads = {n for check in claim["checks"] for n in check.get("spread", {}).values()}
    unbounded = {m for m in spreads & measured_here if values[m] == math.inf}
    broken = sorted(m for m in measured_here - unbounded if not math.isfinite(values[m]))
    return broken + sorted(
        m
        for m in measured_here - spreads
        if math.isfinite(values[m]) and outside_domain(values[m], units[m])
    )


# How an observation's reason begins: the claim's premise, then what measured it here.
ABOUT_GPUS = "the book's claim is about GPUs: "


def observation(claim: dict, device: str, unmet: str) -> str:
    """Why a claim about GPUs that CPU cores measured is shown as an observation of this
    machine: its premise, what measured it here, and what would judge it (``unmet``)."""
    return (
        f"{ABOUT_GPUS}{claim['premise_why']}. This run measured it on {device or 'CPU cores'},"
        f" so its numbers describe this machine, not the book ({unmet}: GPUs judge it)"
    )


def _not_judged(
    claim: dict,
    used: pd.DataFrame,
    records: dict[str, dict],
    status: pd.Series,
    scaled: str,
    missing: list[str],
    no_number: list[str],
) -> tuple[str, str] | None:
    """The verdict and reason of a claim that its checks do not decide, in this order: the
    machine lacks its hardware (for a claim about GPUs that CPU cores timed beside other jobs,
    after the next two), a run failed, a number is none (``no_number`` says which), the preset
    scaled it, a metric was not measured here, or it was timed beside other jobs; then a claim
    about GPUs that jobs without a GPU measured is an observation. None where checks decide."""
    # Hardware before scale: a claim the machine lacks the devices for is not applicable for
    # that reason, which no preset cures, whatever the preset scaled.
    requires = claim.get("requires", {})
    machines = provenance.records_of(used, records, claim["evidence"]) if requires else []
    unmet = requires and _unmet(requires, machines)
    # CPU cores standing in for GPUs measured this machine: an observation, where timed alone.
    beside_others = claim.get("timed") and _ran_beside_others(used, records)
    on_cores = unmet and claim.get("premise") == "gpus"
    on_cores = on_cores and not any(m["cuda_devices"] for m in machines)
    if unmet and not on_cores:
        return NOT_APPLICABLE, unmet
    failed_rows = used[status == FAILED]
    # A run that failed or measured no number is a finding even when the preset scaled it: a
    # smaller run that crashes, diverges or times nothing says something is wrong, and the
    # scale is named beside it.
    also = f" (this run was scaled: {scaled})" if scaled else ""
    if len(failed_rows):
        return NOT_REPRODUCED, f"the run failed: {_notes(failed_rows)}{also}"
    if no_number:
        return NOT_REPRODUCED, f"no number was measured: {', '.join(no_number)}{also}"
    if on_cores and beside_others:
        why = "timed beside other jobs, as planned where no claim can judge its time"
        return NOT_APPLICABLE, f"{unmet}; {why}"
    # A crash or a broken number stays a finding beside a part its job had no devices for.
    lacking = _lacking(used, status)
    if len(lacking):
        return NOT_APPLICABLE, _notes(lacking)
    if scaled:
        left_out = f"; this run measures no {', '.join(missing)}" if missing else ""
        return NOT_APPLICABLE, scaled + left_out
    not_here = used[status == NOT_APPLICABLE_STATUS]
    if len(not_here):
        return NOT_APPLICABLE, _notes(not_here)
    if beside_others:
        return NOT_APPLICABLE, RAN_BESIDE_OTHERS
    if on_cores:
        return OBSERVED, observation(claim, provenance.devices_of(used), unmet)
    return None


# How the reason of a timed claim begins where a timing it reads has no measured spread.
NO_SPREAD = "no measured spread: "


def _judged(
    outcomes: list[checks.Outcome], used: pd.DataFrame, quiet: list[list[str]]
) -> tuple[str, str]:
    """The verdict and reason of a claim that its checks' ``outcomes`` decide; ``quiet``: for
    each check, the timings it reads without a measured spread, on which no verdict rests."""
    failed = [o for o in outcomes if not o.passed]
    # What the measurement itself noted (e.g. why two numbers are equal) explains the finding.
    noted = used[text(used["note"]) != ""] if "note" in used else used[:0]
    why = f"; note: {_notes(noted)}" if len(noted) else ""
    how = "; ".join(o.measured for o in failed) + why
    beyond = [o for o, q in zip(outcomes, quiet) if not (o.passed or q)]
    if any(not (o.within_noise or o.out_of_reach) for o in beyond):
        return NOT_REPRODUCED, FAILED_CHECK + how
    noiseless = list(dict.fromkeys(m for q in quiet for m in q))
    if noiseless:
        # A difference from the book or a pass would be a single timing against the bound.
        return INCONCLUSIVE, (
            f"{NO_SPREAD}{', '.join(noiseless)} {'is' if len(noiseless) == 1 else 'are'} timed"
            " without repeats that give a spread (one seed, one timed epoch or one pair), so"
            " this run cannot tell the book's bound from the noise; more seeds or timed"
            f" repeats judge it: {'; '.join(o.measured for o in outcomes)}{why}"
        )
    if not failed:
        return REPRODUCED, ""
    # Each failed check sat within its noise, or its data could not have met the bound.
    return INCONCLUSIVE, how


def _quiet(claim: dict, values: dict, units: dict, name) -> list[list[str]]:
    """For each check of a ``timed`` claim, the timings it reads without a measured spread,
    by ``name``."""
    return [
        [name(m) for m in checks.unmeasured_noise(check, values.__getitem__, units.__getitem__)]
        if claim.get("timed")
        else []
        for check in claim["checks"]
    ]


def evaluate_claim(
    claim: dict,
    metrics: pd.DataFrame,
    records: dict[str, dict],
    deviations: list = (),
    preset: str = "book",
    rates: dict | None = None,
    overridden=(),
) -> dict:
    """One row of claims.csv for ``claim``, given the rows of its evidence file and the
    records of the machines they name (:mod:`d2lrepro.core.provenance`), the settings the
    run changed (``deviations``: (key, book value, value) triples; ``overridden``: those
    given with --config or --configfile) and the training rates its runs measured by setting.

    "not applicable here": the machine lacks the hardware (the claim's ``requires``, or a
    metric's note saying what its job lacked: this reason comes first, since no preset cures
    it), cannot measure a metric, the preset scaled a setting the claim depends on (which may
    leave out what measures a metric: a metric missing otherwise is an error), or the claim
    is ``timed`` and a job that timed it ran beside other jobs. "not reproduced": a check
    failed, or the run behind a metric diverged, failed or measured nothing, or a number it
    derived is not finite. "inconclusive here": every check that failed had the bound within
    its measured spread or beyond what its data could reach (then with the seeds that would),
    or a ``timed`` claim reads a timing with no measured spread. "observed on this machine":
    a claim about GPUs measured where the jobs had none. Measured numbers are always shown.
    """
    row = {
        k: claim.get(k, "")
        for k in ("id", "kind", "headline", "statement", "printed", "printed_en", "evidence")
    }
    depends_on, deviations = claim.get("depends_on", []), scaling.bearing_on(claim, deviations)
    scaled = scaling.scaled_reason(depends_on, deviations, preset, rates or {}, overridden)
    used, missing = _used(claim, metrics, depends_on, deviations)
    row["device"] = provenance.devices_of(used)
    row["hosts"] = provenance.hosts_of(used, records)
    status = evidence.statuses(used, claim["evidence"])
    units = evidence.units(used, claim["evidence"])
    values = dict(zip(used["metric"], used["value"].astype(float)))
    measured_here = set(used["metric"][status == ""])
    prefix = claim["id"] + "."  # metric names often repeat the claim's id

    def name(metric):
        return metric.removeprefix(prefix)

    def shown(metric):
        return f"{name(metric)} = {checks.quantity(values[metric], units[metric])}"

    evidence.check_spreads(claim, values, measured_here)
    broken = _broken(claim, values, units, measured_here)
    outcomes = []
    if all(math.isfinite(v) or v == math.inf for v in values.values()) and not broken + missing:
        outcomes = [
            checks.apply(check, values.__getitem__, name, units.__getitem__)
            for check in claim["checks"]
        ]
    measured = "; ".join(o.measured for o in outcomes) or "; ".join(
        shown(m) for m in values if math.isfinite(values[m])
    )
    # A number derived from finite ones may be none (a ratio that overflows to inf).
    no_number = [evidence.no_number(m, values[m], units[m], name) for m in broken]
    no_number += [o.measured for o in outcomes if not o.finite]
    not_judged = _not_judged(claim, used, records, status, scaled, missing, no_number)
    verdict, reason = not_judged or _judged(outcomes, used, _quiet(claim, values, units, name))
    if verdict == INCONCLUSIVE:
        reason += scaling.settled_by(claim, outcomes, values, rates or {})
    # A claim judged beside settings the preset changed in its experiment says which.
    scale = "" if verdict == NOT_APPLICABLE else scaling.judged_at_scale(claim, deviations)
    # What training at the book's settings would take here, by family of runs, for a claim
    # judged at the book's scale only: the report adds up the families of all such claims.
    at_book = reason.startswith(scaling.SCALED_REASON)
    seconds = (
        json.dumps(scaling.book_seconds(depends_on, deviations, rates or {})) if at_book else ""
    )
    return row | {
        "measured": measured,
        "verdict": verdict,
        "reason": reason,
        "scale": scale,
        "book_scale_s": seconds,
    }


def evaluate(
    ledger: dict,
    read_metrics,
    read_machines,
    deviations: list = (),
    preset: str = "book",
    rates: dict | None = None,
    overridden=(),
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
                | evaluate_claim(
                    claim, cache[path], records[path], deviations, preset, rates, overridden
                )
            )
    return pd.DataFrame(rows, columns=COLUMNS)
