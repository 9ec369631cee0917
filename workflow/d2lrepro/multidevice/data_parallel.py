"""Data-parallel training (``mgpu.*``, ``mgpuc.*``), the experiment's face: each run of the
config's ``data_parallel.runs`` trained on its devices by
:mod:`~d2lrepro.multidevice.parts.worker` (from scratch or through DDP, under torchrun from
:mod:`~d2lrepro.multidevice.parts.launcher`), and the experiment's summary: its runs' metrics
(:mod:`~d2lrepro.multidevice.parts.run_results`) and figures."""

from __future__ import annotations

import hashlib
import json
import os

import pandas as pd

from d2lrepro.core import paths
from d2lrepro.core.results import (
    TOPK_COLUMNS,
    write_csv,
    write_metrics,
    write_not_applicable,
)


def check_runs(runs: dict) -> None:
    """What the config schema cannot say about the runs (``data_parallel.runs``), checked as
    the workflow is parsed: each model has its 1- and 2-device runs, the devices split evenly
    over the nodes, and the global batch over the devices."""
    # The book's one-process code runs each model on 1 and 2 devices, as <model>.1 and .2.
    for model in sorted({run["model"] for run in runs.values()}):
        for devices in (1, 2):
            if f"{model}.{devices}" not in runs:
                raise ValueError(
                    f"config key 'data_parallel.runs.{model}.{devices}': missing, and a model"
                    " with runs needs its 1- and 2-device runs (the one-process code runs both)"
                )
    for name, run in runs.items():
        devices, nodes, batch = run["devices"], run.get("nodes", 1), run["batch_size"]
        if devices % nodes:
            raise ValueError(
                f"config key 'data_parallel.runs.{name}': {devices} devices do not split evenly"
                f" over {nodes} nodes"
            )
        if batch % devices:
            raise ValueError(
                f"config key 'data_parallel.runs.{name}': batch_size {batch} does not split"
                f" evenly over {devices} devices"
            )


def run_argv(run: dict) -> list[str]:
    """Command-line flags for one training run of the config (model, epochs, batch_size, lr...)."""
    flags = (
        "model",
        "epochs",
        "batch_size",
        "lr",
        "momentum",
        "weight_decay",
        "train_subset",
        "test_subset",
    )
    return [
        item
        for key in flags
        if run.get(key) is not None
        for item in (f"--{key.replace('_', '-')}", str(run[key]))
    ]


def train(
    name: str,
    run: dict,
    seed: int,
    data,
    history,
    topk,
    topk_every: int,
    timeout: float,
    log_path,
    shortfall: str = "",
) -> None:
    """Train run ``name`` of the config on its devices, or record why it cannot run here: the
    ``shortfall`` the run's plan found (then nothing here starts torch), else what the job
    finds. Its claims are about the algorithm (accuracy, identical replicas), so its workers
    may share the job's GPUs: on one GPU, 2 workers share it, and its rows say so
    (:func:`~d2lrepro.core.devices.describe`).

    The checkpoint lives outside the outputs, so an interrupted job resumes from it; its name
    carries the run's settings, so a changed setting never resumes from a stale one."""
    nodes = run.get("nodes", 1)
    reason = shortfall
    if not reason:
        # Here, not at the top: it imports torch, which neither the summary's job nor a
        # light one needs.
        from d2lrepro.multidevice.parts.launcher import nodes_unavailable

        reason = nodes_unavailable(nodes, run["devices"], share=True)
    if reason:
        write_not_applicable(history, reason)
        write_csv([], topk, TOPK_COLUMNS)
        return
    from d2lrepro.multidevice.parts import worker
    from d2lrepro.multidevice.parts.launcher import launch

    key = hashlib.sha256(json.dumps([run, seed], sort_keys=True).encode()).hexdigest()[:12]
    # Only the run that logs top-k pays for its collectives; the others leave the file empty.
    topk_args = ["--topk-out", str(topk), "--topk-every", str(topk_every)]
    if not run.get("topk"):
        write_csv([], topk, TOPK_COLUMNS)
        topk_args = []
    checkpoint = paths.CHECKPOINTS / f"{name}-{key}.pt"
    launch(
        worker,
        run["devices"],
        run_argv(run)
        + [
            "--data",
            str(data),
            "--out",
            str(history),
            "--checkpoint",
            str(checkpoint),
            "--seed",
            str(seed),
            "--timeout",
            str(timeout),
            *topk_args,
        ],
        log_path,
        nodes,
        run_id=f"{name}-{key}-{os.environ.get('SLURM_JOB_ID', os.getpid())}",
        share_gpus=True,
    )
    checkpoint.unlink()


def summarize(
    run_files: dict,
    single_process_files: list,
    topk_files: dict,
    records: dict[str, dict],
    metrics_out,
    figure_paths: dict,
    book: pd.DataFrame,
    scaled: list = (),
) -> None:
    """The experiment's metrics (``run_files``: (run, seed) -> its history) and figures:
    test accuracy and epochs per model beside the book's curves (``book``) and the book's
    one-process runs of the same settings (``single_process_files``, drawn only: their metrics are
    :func:`d2lrepro.multidevice.single_process.summarize`'s), throughput, and the top-k logs
    (``topk_files``: run -> its first seed's log). Each row and each figure's footer names the
    machines of the jobs that measured its data (``records``), and each figure says what the
    preset scaled of its runs (``scaled``: [key, book preset's value, this run's value] of the
    experiment's settings that differ)."""
    from d2lrepro.multidevice.parts import figures, run_results  # only in the job that summarizes

    def scale(model: str = "") -> list:
        """The scaled settings of ``model``'s runs (of every run, without one)."""

        def concerns(key: str) -> bool:
            run = key.partition(".runs.")[2]
            return not (run and model) or run_results.model_of(run) == model

        return [d for d in scaled if concerns(d[0])]

    trained = run_results.load_runs(run_files)
    write_metrics(run_results.metrics(trained, book), metrics_out)
    book_code = run_results.book_code_runs(single_process_files)
    histories = trained | run_results.load_runs(book_code)
    for model, section in (("lenet", "mgpu"), ("resnet18", "mgpuc")):
        of_model = {k: v for k, v in histories.items() if run_results.model_of(k) == model}
        drawn = run_results.footer(records, *of_model.values())
        figures.draw_test_acc(
            of_model,
            run_results.label,
            figure_paths[f"{section}_test_acc"],
            drawn,
            book,
            run_results.BOOK_CURVE_IDS,
            scale(model),
        )
        epochs = figure_paths[f"{section}_epochs"]
        figures.draw_epochs(of_model, run_results.label, epochs, drawn, scale(model))
    values = {r["metric"]: r["value"] for r in run_results.metrics(histories, book)}
    every_run = run_results.footer(records, *histories.values())
    figures.draw_throughput(values, list(histories), figure_paths["throughput"], every_run, scale())
    logs = {run: pd.read_csv(path) for run, path in topk_files.items()}
    logged = {name: rows for name, rows in logs.items() if len(rows)}
    drawn = run_results.footer(records, *(logged or histories).values())
    unlogged = sorted(logs.keys() - logged.keys())
    missing = figures.not_run({name: histories[name] for name in unlogged})
    figures.draw_topk(logged, figure_paths["topk"], drawn, missing, scale("resnet18"))
