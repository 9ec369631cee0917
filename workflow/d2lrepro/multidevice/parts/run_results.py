"""What a training run on 1 or 2 devices measured (``mgpu.*``, ``mgpuc.*``), shared by the
experiments that train (:mod:`~d2lrepro.multidevice.data_parallel`,
:mod:`~d2lrepro.multidevice.single_process`): per-run and 1-vs-2-device metrics, and the
footer naming the machines that measured them.

A run's times and throughputs (``sec_per_epoch``, ``samples_per_s``, ``steady_samples_per_s``,
and the speed-ups built on them) are medians over each seed's epochs after its first: the
first pays one-off set-up (cuDNN's and cuBLAS's handles, NCCL's first collectives, the
allocator's first blocks) that weighs most where an epoch takes a fraction of a second. A run
of one epoch has only that epoch, and its metrics say so. A run of several workers also
reports how far apart their parameters ever lay at an epoch's end (``replica_gap``, the
largest over its seeds and epochs).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from d2lrepro.core import provenance, reference
from d2lrepro.core.results import (
    NOT_APPLICABLE,
    failed,
    iqr,
    late_iqr,
    metric,
    not_applicable,
    seed_spread,
)

# The ledger id of each run's test-accuracy curve in the book.
BOOK_CURVE_IDS = {
    "lenet.1": "mgpu.1gpu",
    "lenet.2": "mgpu.2gpu",
    "resnet18.1": "mgpuc.1gpu",
    "resnet18.2": "mgpuc.2gpu",
}
# Runs whose book curves are judged only where the editions agree (``curve_excess_agreed``):
# where they lie no further apart than the editions' curves of this run on one device ever do.
AGREEMENT = {"resnet18.2": "mgpuc.1gpu"}

# The units of a run's and a comparison's numbers that are not pure numbers.
UNITS = {"sec_per_epoch": "s", "speedup": "x", "speedup_iqr": "x"} | dict.fromkeys(
    ("samples_per_s", "steady_samples_per_s"), "samples/s"
)
# The metrics of two runs' speed: the speed-up, its spread and the scaling efficiency.
SPEED = ("speedup", "speedup_iqr", "efficiency")
NO_SPREAD = "no spread measured: one seed, one timed epoch and one timed batch on each device count"
BY_BATCH = (
    "its spread: the IQR of the ratios of each timed batch's examples/s on 2 devices to each"
    " one's on 1 (one seed, one timed epoch)"
)


# Runs of the book's one-process code (single_process) are named apart from the
# data-parallel runs of the same settings.
SINGLE_PROCESS = "single_process_"


def load_runs(files: dict) -> dict[str, pd.DataFrame]:
    """Histories by run name, with a ``seed`` column, from ``files``: (run, seed) -> the
    history of that seed of that run, as the workflow names them from its config (never read
    back from a file's name)."""
    runs: dict[str, list] = {}
    for (name, seed), file in files.items():
        runs.setdefault(name, []).append(pd.read_csv(file).assign(seed=int(seed)))
    return {name: pd.concat(frames, ignore_index=True) for name, frames in runs.items()}


def book_code_runs(files) -> dict:
    """The book's one-process runs (``files``: ``<run>.csv``, one each), as :func:`load_runs`
    takes them: seed 0, named apart from the data-parallel runs of the same settings
    (:data:`SINGLE_PROCESS`)."""
    return {(SINGLE_PROCESS + Path(file).stem, 0): file for file in files}


def steady_rates(timed: pd.DataFrame) -> pd.Series:
    """Each epoch's examples per second on its whole batches after its first; the book's
    one-process code records no first batch, so its rate is the epoch's."""
    return timed.get("steady_samples_per_s", timed["samples_per_s"])


def timed_epochs(history: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The epochs whose times count, each seed's after its first, with no note; where every
    seed ran one epoch, those epochs, with a note that their times include the set-up."""
    first = history.groupby("seed")["epoch"].transform("min")
    later = history[history["epoch"] > first]
    if len(later):
        return later, ""
    return history, "one epoch: its time includes one-off set-up that later epochs skip"


def measured_by(rows: list[dict], *frames: pd.DataFrame) -> list[dict]:
    """``rows`` naming the machines that measured ``frames``, the data they were built from,
    and their devices (a row not measured names none)."""
    cell = provenance.join(*(provenance.of_frame(f) for f in frames))
    device = {"device": provenance.devices_of(*frames)}
    return [
        r | {provenance.COLUMN: cell} | (device if r["status"] != NOT_APPLICABLE else {})
        for r in rows
    ]


def run_metrics(name: str, history: pd.DataFrame, book: pd.DataFrame) -> list[dict]:
    """Over the run's seeds: the median final test accuracy and its spread (IQR across seeds,
    or with one seed its last five epochs' IQR); over the epochs after each seed's first
    (:func:`timed_epochs`), the median seconds per epoch (the book's timer.avg is a mean over
    all of them), samples/s over whole epochs and on each epoch's whole batches after its
    first; and for a run the book drew, how far the median test-accuracy curve strays
    outside the band of the book's editions (for a run of :data:`AGREEMENT`, also only where
    the editions agree: ``curve_excess_agreed``); not applicable where the machine lacks its
    devices, failed where a seed diverged. The book's code records no first batch: its
    steady rate is the epoch's."""
    names = (
        "test_acc",
        "test_acc_spread",
        "sec_per_epoch",
        "samples_per_s",
        "steady_samples_per_s",
    )
    names += ("curve_excess",) if name in BOOK_CURVE_IDS else ()
    names += ("curve_excess_agreed",) if name in AGREEMENT else ()
    # The book's one-process code copies its parameters to each device; the workers keep theirs.
    names += () if name.startswith(SINGLE_PROCESS) else ("replica_gap",)
    note = history["note"].dropna().astype(str) if "note" in history else pd.Series(dtype=str)
    if len(note) and note.iloc[0]:
        return [not_applicable(f"{name}.{n}", note.iloc[0], UNITS.get(n, "")) for n in names]
    device = provenance.devices_of(history)
    if history["diverged"].astype(bool).any():
        at = history[history["diverged"].astype(bool)].iloc[0]
        why = f"{name} seed {at.seed} diverged at epoch {at.epoch} (train loss {at.train_loss:.3g})"
        return [failed(f"{name}.{n}", why, UNITS.get(n, ""), device) for n in names]
    seeds = [h for _, h in history.groupby("seed")]
    final = pd.Series([h["test_acc"].iloc[-1] for h in seeds])
    timed, note = timed_epochs(history)
    rows = [
        metric(f"{name}.test_acc", final.median(), device=device),
        metric(
            f"{name}.test_acc_spread",
            seed_spread(final, late_iqr(seeds[0]["test_acc"])),
            device=device,
        ),
        metric(f"{name}.sec_per_epoch", timed["seconds"].median(), "s", device, note),
        metric(f"{name}.samples_per_s", timed["samples_per_s"].median(), "samples/s", device, note),
        metric(
            f"{name}.steady_samples_per_s",
            steady_rates(timed).median(skipna=False),
            "samples/s",
            device,
            note,
        ),
    ]
    if name in BOOK_CURVE_IDS:
        curve = history.groupby("epoch")["test_acc"].median()
        excess = reference.band_excess(
            book, BOOK_CURVE_IDS[name], "test_acc", curve.index, curve.values
        )
        rows.append(metric(f"{name}.curve_excess", excess, "|Δ|", device))
    if name in AGREEMENT:
        within = reference.edition_gap(book, AGREEMENT[name], "test_acc")
        excess = reference.band_excess(
            book, BOOK_CURVE_IDS[name], "test_acc", curve.index, curve.values, agree_within=within
        )
        note = (
            f"judged where the editions lie within {within:.3f} ({AGREEMENT[name]}'s largest gap)"
        )
        agreed = f"{name}.curve_excess_agreed"
        if math.isnan(excess):  # a short run reaches none of those epochs: nothing to judge
            why = f"{note}: this run's {len(curve)} epoch(s) reach none of them"
            rows.append(not_applicable(agreed, why, device=device))
        else:
            rows.append(metric(agreed, excess, "|Δ|", device, note))
    if "replica_gap" in names:
        rows.append(replica_metric(name, history, device))
    return rows


def replica_metric(name: str, history: pd.DataFrame, device: str) -> dict:
    """``<run>.replica_gap`` (``mgpu.2gpu.replicas``): the largest, over the run's seeds and
    the ends of its epochs, of the largest absolute difference between any worker's parameters
    and the first worker's
    (:func:`d2lrepro.multidevice.parts.allreduce_by_hand.replica_gap`); a distance (at least
    0), 0 where the replicas stayed identical. Not applicable on one device, which has no
    replicas to compare; failed where the run recorded no gap."""
    gap = f"{name}.replica_gap"
    if "replica_gap" not in history:
        return failed(gap, f"{name} recorded no gap between its replicas", device=device)
    if (history["world_size"] == 1).all():
        why = f"{name} trained on one device: no replicas to compare"
        return not_applicable(gap, why, device=device)
    return metric(gap, history["replica_gap"].max(skipna=False), "|Δ|", device)


def unequal_work(one: pd.DataFrame, two: pd.DataFrame) -> str:
    """Why two runs' steady throughputs do not compare the same work ("" when they do): their
    epochs must train the same examples, and each must have a whole batch after its first
    (:func:`d2lrepro.multidevice.parts.worker.steady_rate`)."""
    examples = sorted({int(n) for h in (one, two) for n in h["examples"]})
    if len(examples) > 1:
        return f"the runs train different numbers of examples per epoch: {examples}"
    if one["steady_samples_per_s"].isna().any() or two["steady_samples_per_s"].isna().any():
        return "a run has no whole batch after its first: no steady throughput to compare"
    return ""


def batch_ratios(one: pd.DataFrame, two: pd.DataFrame) -> list[float]:
    """Each timed batch's examples/s on 2 devices (run ``two``'s ``batch_rates``, of the
    epochs that :func:`timed_epochs` times) over each timed batch's on 1 (``one``'s), every
    pairing of the two: the runs are separate jobs whose batches do not correspond (2 devices
    often train a larger global batch, so fewer of them), so no pairing is more right than
    another. Their spread is that of the ratio of single batches, wider than that of the
    epochs' rates whose ratio is the speed-up: a margin beyond it is a safe one. Empty where a
    run recorded no batch rates (the book's one-process code)."""
    rates = [timed_epochs(h)[0].get("batch_rates") for h in (one, two)]
    if any(r is None for r in rates):
        return []
    a, b = ([float(x) for cell in r.dropna() for x in str(cell).split()] for r in rates)
    return [y / x for x in a for y in b]


def paired_speedup(one: pd.DataFrame, two: pd.DataFrame) -> tuple[float, float, str]:
    """Run ``two``'s speed-up over ``one``, its spread and a note, over the seeds both ran:
    each seed's median timed :func:`steady_rates` on 2 devices over its median on 1, the
    median of these over the seeds and their IQR (the part of a drift between jobs that
    differs from seed to seed is in it; a drift common to every 1-device job against every
    2-device one is not);
    with one seed, the IQR of its epoch-by-epoch ratios (each timed epoch on 2 devices over
    the same epoch on 1) instead; with one timed epoch, the IQR of its batches' ratios
    (:func:`batch_ratios`, which the note says); with one timed batch on each device count,
    no spread (NaN), which the note says."""
    a, b = (steady_rates(timed_epochs(h)[0].set_index(["seed", "epoch"])) for h in (one, two))
    per_seed = (b.groupby("seed").median() / a.groupby("seed").median()).dropna()
    by_epoch = (b / a).dropna()
    if per_seed.empty:
        return math.nan, math.nan, "the two runs share no seed: no speed-up to measure"
    speedup = float(per_seed.median())
    if len(per_seed) > 1:
        return speedup, iqr(per_seed), ""
    if len(by_epoch) > 1:
        return speedup, iqr(by_epoch), ""
    seed = per_seed.index[0]
    by_batch = batch_ratios(*(h[h["seed"] == seed] for h in (one, two)))
    if len(by_batch) > 1:
        return speedup, iqr(by_batch), BY_BATCH
    return speedup, math.nan, NO_SPREAD


def shared_gpus(history: pd.DataFrame) -> str:
    """Why a run's times are not those of devices of its own: its workers shared GPUs (they
    ran on fewer devices than they were, ``devices_used``); "" where each had its own."""
    if "devices_used" not in history:
        return ""
    used, world = history["devices_used"].min(), history["world_size"].max()
    if used >= world:
        return ""
    return (
        f"its {world} workers shared {used} GPU{'s' if used != 1 else ''}: not a speed-up of"
        " devices of their own"
    )


def comparison_metrics(
    rows: dict[str, dict], model: str, histories: dict[str, pd.DataFrame]
) -> list[dict]:
    """Speed-up (steady throughput, 2 devices over 1: :func:`paired_speedup`), its spread
    and the scaling efficiency of run ``<model>.2`` over ``<model>.1``, and the test accuracy
    difference (absolute, and 2 devices minus 1); these inherit "not applicable" or
    "failed" from the runs they compare, and the speed-up is not applicable where the runs'
    epochs are not the same work (:func:`unequal_work`); it carries the throughputs' notes (a
    run of one epoch), says whose spread it has, and where the workers of ``<model>.2``
    shared GPUs (:func:`shared_gpus`: the records of its job name the GPUs it had, by which a
    claim that needs 2 GPUs is judged). Where it has no spread, its spread is not applicable,
    with why."""
    one, two = f"{model}.1", f"{model}.2"
    rate = "steady_samples_per_s"
    needed = [rows[f"{run}.{n}"] for run in (one, two) for n in (rate, "test_acc")]
    names = (*SPEED, "acc_diff", "acc_change")
    for status, make in (("failed", failed), ("not applicable", not_applicable)):
        notes = sorted({r["note"] for r in needed if r["status"] == status})
        if notes:
            return [make(f"{model}.{n}", "; ".join(notes), UNITS.get(n, "")) for n in names]
    value = {r["metric"]: r["value"] for r in needed}
    speedup, spread, alone = paired_speedup(histories[one], histories[two])
    notes = {rows[f"{run}.{rate}"]["note"] for run in (one, two)}
    notes |= {alone, shared_gpus(histories[two])}
    note = "; ".join(sorted(notes - {""}))
    speed = [
        metric(f"{model}.speedup", speedup, "x", note=note),
        metric(f"{model}.speedup_iqr", spread, "x", note=note),
        metric(f"{model}.efficiency", speedup / 2, note=note),
    ]
    if alone == NO_SPREAD:
        speed[1] = not_applicable(f"{model}.speedup_iqr", note, "x")
    if "examples" in histories[one] and (why := unequal_work(histories[one], histories[two])):
        speed = [not_applicable(f"{model}.{n}", why, UNITS.get(n, "")) for n in SPEED]
    return speed + [
        metric(
            f"{model}.acc_diff", abs(value[f"{two}.test_acc"] - value[f"{one}.test_acc"]), "|Δ|"
        ),
        metric(f"{model}.acc_change", value[f"{two}.test_acc"] - value[f"{one}.test_acc"]),
    ]


def model_of(run: str) -> str:
    """The model a run trains, from its name: ``resnet18_momentum.1`` and
    ``single_process_resnet18.2`` train ``resnet18``."""
    return run.removeprefix(SINGLE_PROCESS).split(".")[0].split("_")[0]


def label(name: str, h: pd.DataFrame) -> str:
    """A run in words: its devices, batch and lr, and how it was run."""
    first = h.iloc[0]
    how = "one process, book's code" if name.startswith(SINGLE_PROCESS) else name
    return f"{first.world_size} dev, batch {first.batch_size}, lr {first.lr:g} ({how})"


def metrics(histories: dict[str, pd.DataFrame], book: pd.DataFrame) -> list[dict]:
    """Each run's metrics (:func:`run_metrics`) and each pair's comparison, ``<p>.2`` over
    ``<p>.1`` (:func:`comparison_metrics`), each row naming the machines that measured it."""
    rows = []
    for name, history in histories.items():
        rows += measured_by(run_metrics(name, history, book), history)
    by_name = {r["metric"]: r for r in rows}
    pairs = sorted({n.rsplit(".", 1)[0] for n in histories if n.endswith(".2")})
    for prefix in (p for p in pairs if f"{p}.1" in histories):
        runs = (histories[f"{prefix}.1"], histories[f"{prefix}.2"])
        rows += measured_by(comparison_metrics(by_name, prefix, histories), *runs)
    return rows


def footer(records: dict[str, dict], *frames: pd.DataFrame) -> str:
    """A figure's footer: the devices and machines that measured ``frames`` (``records``: each
    job's machine record), or "" when nothing was drawn."""
    return provenance.footer(records, *frames, where="the multi-device runs")
