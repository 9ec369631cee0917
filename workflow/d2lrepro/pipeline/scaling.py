"""Claims judged at the book's scale only: what a preset scaled that a claim depends on, and how
long training at the book's settings would take on this machine, at the rates this run's own
runs measured after start-up."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from d2lrepro.core.results import run_spread_names
from d2lrepro.pipeline.checks import runs_to_judge
from d2lrepro.pipeline.settings import LEFT_OUT, NOT_IN_BOOK, changed_by

SCALED_REASON = "judged at the book's scale only"
# How a scaled claim's reason ends: a tree made with one preset refuses another, so the book
# preset runs in a tree of its own, beside this one (the report's table gives the command).
BOOK_SCALE_JUDGES = (
    "the book preset judges it in a results tree of its own, beside this one: see what would"
    " judge the rest"
)

# How the reason ends where --config or --configfile changed what the claim depends on.
OVERRIDE_JUDGES = (
    "the book's settings judge it: the book preset without the values given with --config or"
    " --configfile, in a results tree of its own beside this one"
)

# Settings whose ratio says how much more work the book's run is (None: the full data set);
# a list setting (seeds, lrs) scales the work by its length.
WORK_SETTINGS = {"epochs": None, "train_subset": 60_000}
# The settings that change only how large a run is, not what it computes.
SIZE_SETTINGS = {"epochs", "train_subset", "test_subset", "batch_size"}


@dataclass(frozen=True)
class Rate:
    """What this run's runs of one family trained: ``examples`` over all their epochs, and the
    seconds an example took after start-up (NaN where they trained nothing: ``nothing`` says
    why, from their histories' notes)."""

    examples: float
    seconds_per_example: float
    nothing: str = ""


def rate(histories: list[pd.DataFrame]) -> Rate:
    """The :class:`Rate` of the runs whose histories are ``histories``: one row per epoch
    (``epoch``, ``seconds``, ``samples_per_s``; a ``seed`` where a file holds several runs), or
    a ``note`` where a run could not train here. Only the time of training counts (a job's
    start-up and testing are not in ``seconds``), and of it each run's epochs after its first,
    which pays one-off set-up, or its only epoch; an epoch's rate is its
    ``steady_samples_per_s`` where recorded (its whole batches after the first), else its
    ``samples_per_s``."""
    trained = [
        h.assign(run=i, seed=h.get("seed", 0))
        for i, h in enumerate(histories)
        if "seconds" in h and len(h)
    ]
    if not trained:
        notes = sorted({str(n) for h in histories if "note" in h for n in h["note"].dropna()})
        return Rate(0.0, math.nan, "; ".join(notes) or "its histories are empty")
    epochs = pd.concat(trained, ignore_index=True)
    epochs["examples"] = epochs["seconds"] * epochs["samples_per_s"]
    runs = epochs.groupby(["run", "seed"])["epoch"]
    counted = epochs[(epochs["epoch"] > runs.transform("min")) | (runs.transform("size") == 1)]
    steady = counted.get("steady_samples_per_s", counted["samples_per_s"])
    seconds = counted["examples"] / steady.fillna(counted["samples_per_s"])
    return Rate(float(epochs["examples"].sum()), float(seconds.sum() / counted["examples"].sum()))


def rates(files: dict[str, list[str]]) -> dict[str, Rate]:
    """The :class:`Rate` of each family of runs: ``files`` maps a config key to the history
    files of the runs that ran it."""
    return {key: rate([pd.read_csv(p) for p in paths]) for key, paths in files.items() if paths}


def duration(seconds: float) -> str:
    """A time as a reader reads it: "45 s", "30 min", "51 h"."""
    if seconds >= 7200:
        return f"{seconds / 3600:.0f} h"
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


def _more_seeds(deviation) -> bool:
    """Whether ``deviation`` runs every seed of the book's and more: the same experiment more
    often, which scales nothing down."""
    key, book, value = deviation
    lists = isinstance(book, list) and isinstance(value, list)
    return key.rsplit(".", 1)[-1] == "seeds" and lists and set(book) < set(value)


def bearing_on(claim: dict, deviations: list) -> list:
    """The deviations by which to judge ``claim``: every one but seeds added to the book's
    (:func:`_more_seeds`) and entries added beside the book's (a run, a setting of a sweep)
    that the claim does not name itself: they run more, and change no run of the book's; for
    an output of the code, which holds at any size of run, none of the settings it depends on
    where the preset changed only their runs' size (``SIZE_SETTINGS``), as if they were the
    book's."""
    named = claim.get("depends_on", [])
    deviations = [
        d for d in deviations if not (_more_seeds(d) or (d[1] == NOT_IN_BOOK and d[0] not in named))
    ]
    hits = _hits(named, deviations)
    sized = all(d[2] != LEFT_OUT and d[0].rsplit(".", 1)[-1] in SIZE_SETTINGS for d in hits)
    if claim.get("kind") == "output" and sized:
        return [d for d in deviations if d not in hits]
    return list(deviations)


def names_left_out(metric: str, depends_on: list[str], deviations: list) -> bool:
    """Whether ``metric`` names something a preset left out of a setting the claim depends
    on: a run it mapped to null (``data_parallel.runs.resnet18_b256.2`` in
    ``resnet18_b256.2.test_acc``) or a value it dropped from a list (``intended`` of
    ``lr_schedules.semantics`` in ``multistep.intended.test_acc``), as whole dotted parts; a
    whole number dropped from a list as a part that is a word the setting's name begins with
    and the number (64 of ``hybridize.batch_sizes`` in ``hyb.batch64.eager_over_compile``;
    not ``lr1`` for a seed 1 dropped from ``seeds``)."""
    names, numbered = set(), set()
    for key, book, value in _hits(depends_on, deviations):
        if value == LEFT_OUT:
            parts = key.split(".")
            names |= {".".join(parts[i:]) for i in range(1, len(parts)) if not parts[i].isdigit()}
        elif isinstance(book, list) and isinstance(value, list):
            dropped = [v for v in book if v not in value]
            names |= {v for v in dropped if isinstance(v, str)}
            word = key.split(".")[-1]
            numbered |= {(word, v) for v in dropped if type(v) is int}
    words = [re.fullmatch(r"([a-z_]+)(\d+)", part) for part in metric.split(".")]
    return any(f".{name}." in f".{metric}." for name in names) or any(
        m and word.startswith(m[1]) and m[2] == str(n) for m in words for word, n in numbered
    )


def missing_metrics(names, present, depends_on: list[str], deviations: list, where: str):
    """The metrics of ``names`` not among ``present``, sorted. Each must name what a preset
    left out of a setting of ``depends_on`` (:func:`names_left_out`); any other is missing
    because the ledger or a summary is broken: a KeyError saying so of ``where``."""
    missing = sorted(set(names) - set(present))
    unexplained = [m for m in missing if not names_left_out(m, depends_on, deviations)]
    if unexplained:
        raise KeyError(f"{where} has no metric {unexplained}")
    return missing


def experiment_of(evidence: str) -> str:
    """The config key of the experiment whose summary wrote ``evidence``: the folder it lies
    in (results/<chapter>/<experiment>/metrics.csv; results/data/ for the data's)."""
    return Path(evidence).parent.name


def _shown(deviation: tuple) -> str:
    key, book, value = deviation
    return f"{key} = {value} (book: {'all' if book is None else book})"


def judged_at_scale(claim: dict, deviations: list) -> str:
    """The settings the preset changed in the experiment of a ``claim`` (its evidence's) that
    its ``depends_on`` leaves out, so that the claim is judged at this scale and says so
    ("data_parallel.seeds = [0] (book: [0, 1, 2])"); "" where it changed none, and for a
    printed output, the same at any scale. A change inside another part of the experiment
    than the one the claim reads (another network's runs) is not the claim's."""
    if claim.get("kind") == "output":
        return ""
    depends_on = claim.get("depends_on", [])
    experiment, hits = experiment_of(claim["evidence"]), _hits(depends_on, deviations)

    def own(key: str) -> bool:
        if key.split(".")[0] != experiment:
            return False
        # A setting inside a part beside the one the claim reads (runs.resnet18.1.epochs
        # beside runs.lenet.1) is that part's; one of the whole (seeds) is the claim's too.
        for named in depends_on:
            a, b = key.split("."), named.split(".")
            common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            if common < len(b) and len(a) - common > 1:
                return False
        return True

    return "; ".join(_shown(d) for d in deviations if own(d[0]) and d not in hits)


def _families(depends_on: list[str], rates: dict) -> list[str]:
    """The families of runs (config keys of ``rates``) that a claim ``depends_on``."""
    matched = [
        f
        for f in rates
        if any(f == d or d.startswith(f + ".") or f.startswith(d + ".") for d in depends_on)
    ]
    # A family whose own part also matched (airfoil beside airfoil.adam_eps) runs other jobs.
    return [f for f in matched if not any(g.startswith(f + ".") for g in matched)]


def book_seconds(depends_on: list[str], deviations: list, rates: dict) -> dict[str, float]:
    """Family -> the seconds its runs would train at the book's settings here, for each family
    of runs a claim ``depends_on`` that trained in this run, where the preset changed a
    setting the claim depends on ({} where it changed none): the examples it trained times
    the work factor of its own changed settings, at the rate it measured after start-up.
    Claims share families, so the time of several claims is the sum over their distinct
    families (:func:`book_total`)."""
    hits = _hits(depends_on, deviations)
    if not hits:
        return {}
    return {
        f: rates[f].examples
        * _work_factor([h for h in hits if _under(h[0], f)])
        * rates[f].seconds_per_example
        for f in _families(depends_on, rates)
        if rates[f].examples
    }


def _trained_seconds(families: list[str], rates: dict) -> float:
    """The seconds the runs of ``families`` trained in this run, after start-up."""
    return sum(
        rates[f].examples * rates[f].seconds_per_example for f in families if rates[f].examples
    )


def settled_by(claim: dict, outcomes: list, values: dict, rates: dict) -> str:
    """What settles a claim whose ``typical`` check its runs could not (out of reach): more
    seeds in the setting its runs' count comes from (its experiment's seeds, which its
    ``depends_on`` names), and about how long the added ones would train here, at the rate
    of the runs that setting repeats (each seed trains them all again); "" where no such
    check was."""
    key = experiment_of(claim["evidence"]) + ".seeds"
    reach = (
        c for c, o in zip(claim["checks"], outcomes) if c["kind"] == "typical" and o.out_of_reach
    )
    check = next(reach, None)
    if check is None or key not in claim.get("depends_on", []):
        return ""
    runs = int(values[run_spread_names(check["metric"])["runs"]])
    needed = runs_to_judge(check["editions"])
    said = f"; add seeds to {key} in a config file given with --configfile ({runs} in this"
    said += f" run; from {needed}, a window beyond every seed is a finding"
    trained = _trained_seconds(_families([key], rates), rates)
    if trained and runs:
        more = duration(trained * (needed - runs) / runs)
        said += f"; about {more} more training here, one run after another at this run's rates"
    return said + ")"


def book_total(per_claim: list[dict[str, float]]) -> float:
    """The seconds training at the book's settings would take here for several claims, each
    given as its :func:`book_seconds`: each family counted once."""
    return sum({f: s for seconds in per_claim for f, s in seconds.items()}.values())


def scaled_reason(
    depends_on: list[str], deviations: list, preset: str, rates: dict, overridden=()
) -> str:
    """Why a claim is judged only at the book's scale, when the preset (or, for the keys
    ``overridden``, --config or --configfile) changed a setting it depends on ("" when none
    was changed): who changed what, scaled or left out, and how long training
    at the book's settings would take here: each family of runs it depends on (``rates``, by
    config key) trains the examples it trained in this run times the work factor of its own
    settings, at the rate it measured after start-up (families add up); else how much more
    work the book's settings are. Nothing is estimated from a run left out or one that
    trained nothing here (a device it lacked): the reason names them."""
    hits = _hits(depends_on, deviations)
    if not hits:
        return ""
    scaled = [_shown(h) for h in hits if h[2] != LEFT_OUT]
    left_out = [k for k, _, v in hits if v == LEFT_OUT]
    changes = [f"scaled {', '.join(scaled)}"] * bool(scaled) + [
        f"left out {', '.join(left_out)}"
    ] * bool(left_out)
    families = _families(depends_on, rates)
    timed = [f for f in families if rates[f].examples]
    idle = [f for f in families if not rates[f].examples]
    trained = _trained_seconds(timed, rates)
    book = sum(book_seconds(depends_on, deviations, rates).values())
    factor = _work_factor(hits)
    if not scaled or (idle and not timed):  # nothing ran that an estimate could scale
        more = ""
    elif book > trained:
        measured = ", ".join(
            f"{f}: {1 / rates[f].seconds_per_example:,.0f} examples/s" for f in timed
        )
        more = (
            f"; training at the book's settings would take about {duration(book)} here, one"
            f" run after another, at this run's rates after start-up ({measured}, each job"
            " sharing the machine as this run shared it; start-up and testing not counted)"
        )
    elif factor > 1:
        more = f"; the book's settings are about {factor:.3g}x this run's work"
    elif factor < 1:  # more seeds or settings than the book's: not a scaled-down run
        more = f"; this run does about {1 / factor:.3g}x the work of the book's settings"
    else:
        more = ""
    why: dict[str, list[str]] = {}  # the runs that trained nothing, by the reason
    for f in idle:
        why.setdefault(rates[f].nothing, []).append(f)
    unestimated = [f"no job of this run ran {', '.join(left_out)}"] * bool(left_out) + [
        f"{' and '.join(runs)} trained nothing in this run ({note})" for note, runs in why.items()
    ]
    if unestimated:
        them = "it" if len(left_out) + len(idle) == 1 else "them"
        more += (
            f"; {' and '.join(unestimated)}, so that estimate leaves {them} out"
            if more
            else f"; {' and '.join(unestimated)}, so no book-scale time is estimated"
        )
    who = changed_by(preset, overridden, [h[0] for h in hits])
    # The book preset judges a preset's change; one given beside it, a run without it too.
    judges = BOOK_SCALE_JUDGES if who == f"preset {preset}" else OVERRIDE_JUDGES
    return f"{SCALED_REASON}: {who} " + " and ".join(changes) + more + f" ({judges})"
