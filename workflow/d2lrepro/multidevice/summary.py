"""What the multi-GPU runs measured (``mgpu.*``, ``mgpuc.*``): per-run and 1-vs-2-device
metrics, the cost model (at its ends and where t1 and t2 balance), and the sections' figures.

A run's times and throughputs (``sec_per_epoch``, ``samples_per_s``, ``steady_samples_per_s``,
and the speed-ups built on them) are medians over each seed's epochs after its first: the
first pays one-off set-up (cuDNN's and cuBLAS's handles, NCCL's first collectives, the
allocator's first blocks) that weighs most where an epoch takes a fraction of a second. A run
of one epoch has only that epoch, and its metrics say so.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from d2lrepro.core import environment, machines, reference
from d2lrepro.core.results import (
    failed,
    late_iqr,
    metric,
    not_applicable,
    seed_spread,
    write_metrics,
)
from d2lrepro.multidevice import figures

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

# The printed examples' metrics, as the 2 workers of d2lrepro.multidevice.scratch make them.
EXAMPLE_METRICS = [
    *(f"params.b1_{n}" for n in ("zeros", "requires_grad", "on_device", "grad_is_none")),
    *(f"allreduce.shard{r}.{j}" for r in range(2) for j in range(2)),
    *(
        f"{name}.shard{r}.{end}_row"
        for name in ("scatter", "split6x4")
        for r in range(2)
        for end in ("first", "last")
    ),
]

# The cost model at the balanced batch, whose t1 / t2 must lie within 1/BALANCE and BALANCE
# (see cost_metrics).
BALANCED = ("batch", "t1_over_t2", "step_over_max", "max_error", "sum_error")
BALANCE = 2
# The units of a run's and a comparison's numbers that are not pure numbers.
UNITS = {"sec_per_epoch": "s", "speedup": "x"} | dict.fromkeys(
    ("samples_per_s", "steady_samples_per_s"), "samples/s"
)


# Runs of the book's one-process code (single_process) are named apart from the
# data-parallel runs of the same settings.
SINGLE_PROCESS = "single_process_"


def load_runs(paths, prefix: str = "") -> dict[str, pd.DataFrame]:
    """Histories by run name (``prefix`` + the file's), the seeds of a run (files
    ``<run>.seed<n>.csv``) concatenated with a ``seed`` column; the book's one-process code
    runs once (``<run>.csv``)."""
    runs: dict[str, list] = {}
    for path in paths:
        name, _, seed = Path(path).name.removesuffix(".csv").partition(".seed")
        name = prefix + name
        runs.setdefault(name, []).append(pd.read_csv(path).assign(seed=int(seed or 0)))
    return {name: pd.concat(frames, ignore_index=True) for name, frames in runs.items()}


def timed_epochs(history: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The epochs whose times count, each seed's after its first, with no note; where every
    seed ran one epoch, those epochs, with a note that their times include the set-up."""
    first = history.groupby("seed")["epoch"].transform("min")
    later = history[history["epoch"] > first]
    if len(later):
        return later, ""
    return history, "one epoch: its time includes one-off set-up that later epochs skip"


def measured_by(rows: list[dict], *frames: pd.DataFrame) -> list[dict]:
    """``rows`` naming the machines that measured ``frames``, the data they were built from."""
    cell = machines.join(*(machines.of_frame(f) for f in frames))
    return [r | {machines.COLUMN: cell} for r in rows]


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
    note = history["note"].dropna().astype(str) if "note" in history else pd.Series(dtype=str)
    if len(note) and note.iloc[0]:
        return [not_applicable(f"{name}.{n}", note.iloc[0], UNITS.get(n, "")) for n in names]
    device = str(history["devices"].iloc[0])
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
            timed.get("steady_samples_per_s", timed["samples_per_s"]).median(skipna=False),
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
        rows.append(metric(f"{name}.curve_excess", excess, device=device))
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
            rows.append(metric(agreed, excess, device=device, note=note))
    return rows


def unequal_work(one: pd.DataFrame, two: pd.DataFrame) -> str:
    """Why two runs' steady throughputs do not compare the same work ("" when they do): their
    epochs must train the same examples, and each must have a whole batch after its first
    (:func:`d2lrepro.multidevice.worker.steady_rate`)."""
    examples = sorted({int(n) for h in (one, two) for n in h["examples"]})
    if len(examples) > 1:
        return f"the runs train different numbers of examples per epoch: {examples}"
    if one["steady_samples_per_s"].isna().any() or two["steady_samples_per_s"].isna().any():
        return "a run has no whole batch after its first: no steady throughput to compare"
    return ""


def comparison_metrics(
    rows: dict[str, dict], model: str, histories: dict[str, pd.DataFrame]
) -> list[dict]:
    """Speed-up (steady throughput, 2 devices over 1) and scaling efficiency of run
    ``<model>.2`` over ``<model>.1``, and the test accuracy difference (absolute, and 2
    devices minus 1); these inherit "not applicable" or "failed" from the runs they compare,
    and the speed-up is not applicable where the runs' epochs are not the same work
    (:func:`unequal_work`); it carries the throughputs' notes (a run of one epoch)."""
    one, two = f"{model}.1", f"{model}.2"
    rate = "steady_samples_per_s"
    needed = [rows[f"{run}.{n}"] for run in (one, two) for n in (rate, "test_acc")]
    names = ("speedup", "efficiency", "acc_diff", "acc_change")
    for status, make in (("failed", failed), ("not applicable", not_applicable)):
        notes = sorted({r["note"] for r in needed if r["status"] == status})
        if notes:
            return [make(f"{model}.{n}", "; ".join(notes), UNITS.get(n, "")) for n in names]
    value = {r["metric"]: r["value"] for r in needed}
    speedup = value[f"{two}.{rate}"] / value[f"{one}.{rate}"]
    note = "; ".join(sorted({rows[f"{run}.{rate}"]["note"] for run in (one, two)} - {""}))
    speed = [
        metric(f"{model}.speedup", speedup, "x", note=note),
        metric(f"{model}.efficiency", speedup / 2, note=note),
    ]
    if "examples" in histories[one] and (why := unequal_work(histories[one], histories[two])):
        speed = [
            not_applicable(f"{model}.{n}", why, UNITS.get(n, "")) for n in ("speedup", "efficiency")
        ]
    return speed + [
        metric(f"{model}.acc_diff", abs(value[f"{two}.test_acc"] - value[f"{one}.test_acc"])),
        metric(f"{model}.acc_change", value[f"{two}.test_acc"] - value[f"{one}.test_acc"]),
    ]


def cost_metrics(cost: pd.DataFrame, model: str) -> list[dict]:
    """The cost model's verdict numbers: t1 / t2 at the smallest and largest batch, and at the
    balanced batch (least |log t1/t2|: max(t1, t2) and t1 + t2 differ most) the measured step
    over max(t1, t2) and the step's relative error from each; the crossover batch (first
    t1 > t2) is shown.

    The balanced batch must have t1 / t2 within [1/:data:`BALANCE`, :data:`BALANCE`], where
    max(t1, t2) is at most 2/3 of t1 + t2; further apart the two differ too little for the
    step to tell them apart, and the balanced metrics are not applicable: the claim needs a
    step whose communication is comparable to its computation."""
    names = ("t1_over_t2.smallest", "t1_over_t2.largest", "crossover_batch")
    names += tuple(f"balanced.{n}" for n in BALANCED)
    if "note" in cost and cost["note"].notna().any():
        reason = cost["note"].dropna().iloc[0]
        return [not_applicable(f"cost.{model}.{n}", reason) for n in names]
    first, last = cost.iloc[0], cost.iloc[-1]
    dominated = cost[cost["t1"] > cost["t2"]]["batch_per_device"]
    crossover = (
        metric(f"cost.{model}.crossover_batch", dominated.min())
        if len(dominated)
        else failed(f"cost.{model}.crossover_batch", "communication dominates at every batch")
    )
    ends = [
        metric(f"cost.{model}.t1_over_t2.smallest", first.t1 / first.t2, "x"),
        metric(f"cost.{model}.t1_over_t2.largest", last.t1 / last.t2, "x"),
        crossover,
    ]
    at = cost.loc[np.log(cost["t1"] / cost["t2"]).abs().idxmin()]
    ratio = at.t1 / at.t2
    if not 1 / BALANCE <= ratio <= BALANCE:
        why = (
            f"no balanced batch: t1 / t2 is nearest 1 at batch {at.batch_per_device:g} per"
            f" device, {ratio:.3g}, outside 1/{BALANCE}–{BALANCE}, where max(t1, t2) and"
            " t1 + t2 differ too little to tell apart; a model or link whose communication"
            " is comparable to its computation at some batch would judge it"
        )
        return ends + [not_applicable(f"cost.{model}.balanced.{n}", why) for n in BALANCED]
    over = (at.measured_step / max(at.t1, at.t2), at.measured_step / (at.t1 + at.t2))
    values = (at.batch_per_device, ratio, over[0], *(abs(o - 1) for o in over))
    return ends + [metric(f"cost.{model}.balanced.{n}", v) for n, v in zip(BALANCED, values)]


def example_metrics(examples: pd.DataFrame) -> list[dict]:
    """The printed examples as the 2 workers made them, or why they could not be made here."""
    if "metric" not in examples:
        return [not_applicable(name, examples["note"].iloc[0]) for name in EXAMPLE_METRICS]
    return examples.fillna({"unit": "", "note": "", "status": ""}).to_dict("records")


def model_of(run: str) -> str:
    """The model a run trains, from its name: ``resnet18_momentum.1`` and
    ``single_process_resnet18.2`` train ``resnet18``."""
    return run.removeprefix(SINGLE_PROCESS).split(".")[0].split("_")[0]


def _label(name: str, h: pd.DataFrame) -> str:
    """A run in words: its devices, batch and lr, and how it was run."""
    first = h.iloc[0]
    how = "one process, book's code" if name.startswith(SINGLE_PROCESS) else name
    return f"{first.world_size} dev, batch {first.batch_size}, lr {first.lr:g} ({how})"


def summarize(
    runs: list,
    single_process: list,
    costs: list,
    topk: list,
    examples,
    servers,
    records: dict[str, dict],
    metrics_out,
    figure_paths: dict,
    book: pd.DataFrame,
) -> None:
    """Metrics and figures of every training run (``runs``: history CSVs named after the run
    and seed; ``single_process``: the book's one-process code, named after the run) and cost
    model (``costs``: one CSV per step, named after it),
    beside the book's curves (``book``), the top-k logs (``topk``: one CSV per run that logs
    it, ``<run>.seed<n>.topk.csv``), the printed examples (``examples``, a metrics CSV) and
    the parameter-server timings (``servers``, a metrics CSV, drawn only); each row and each
    figure's footer names the machines of the jobs that measured its data (``records``)."""

    def footer(*frames: pd.DataFrame) -> str:
        if not frames:
            return ""
        measured = machines.records_of(pd.concat(frames), records, "the multi-device runs")
        return environment.footer(measured, threads=1, if_no_gpu=True)

    histories = load_runs(runs) | load_runs(single_process, SINGLE_PROCESS)
    cost_tables = {Path(p).stem: pd.read_csv(p) for p in costs}
    rows = example_metrics(pd.read_csv(examples))
    for name, history in histories.items():
        rows += measured_by(run_metrics(name, history, book), history)
    by_name = {r["metric"]: r for r in rows}
    pairs = sorted({n.rsplit(".", 1)[0] for n in histories if n.endswith(".2")})
    for prefix in (p for p in pairs if f"{p}.1" in histories):
        runs = (histories[f"{prefix}.1"], histories[f"{prefix}.2"])
        rows += measured_by(comparison_metrics(by_name, prefix, histories), *runs)
    values = {r["metric"]: r["value"] for r in rows}
    for model, cost in cost_tables.items():
        rows += measured_by(cost_metrics(cost, model), cost)
    write_metrics(rows, metrics_out)
    for model, section in (("lenet", "mgpu"), ("resnet18", "mgpuc")):
        of_model = {k: v for k, v in histories.items() if model_of(k) == model}
        drawn = footer(*of_model.values())
        figures.draw_test_acc(
            of_model, _label, figure_paths[f"{section}_test_acc"], drawn, book, BOOK_CURVE_IDS
        )
        figures.draw_epochs(of_model, _label, figure_paths[f"{section}_epochs"], drawn)
    every_run = footer(*histories.values())
    figures.draw_throughput(values, list(histories), figure_paths["throughput"], every_run)
    logs = {Path(p).name.split(".seed")[0]: pd.read_csv(p) for p in topk}
    logged = {name: rows for name, rows in logs.items() if len(rows)}
    figures.draw_topk(logged, figure_paths["topk"], footer(*(logged or histories).values()))
    figures.draw_cost(cost_tables, figure_paths["cost"], footer(*cost_tables.values()))
    ps = pd.read_csv(servers)
    figures.draw_param_server(ps, figure_paths["ps"], footer(ps))
