"""The opening of every workflow script: the job's log, its GPUs and its threads, from the
``snakemake`` object Snakemake hands the script. Serves every section of the ledger."""

from __future__ import annotations

import atexit
import enum
import json
import logging
import os
from pathlib import Path

from d2lrepro.core import environment, logs, provenance
from d2lrepro.pipeline import job_server


class WhenShort(enum.Enum):
    """What a job does where the run's plan found it short of devices (:func:`shortfall`)."""

    NOTHING = "measures nothing"
    ONE_DEVICE = "measures what one device can: on a share of a GPU, else on the CPU"
    ONE_GPU = "measures what one GPU can, on a share of one; where the plan gave it none, nothing"


def start(
    snakemake,
    gpus: bool | str = False,
    threads: bool = False,
    workers: bool = False,
    when_short: WhenShort = WhenShort.NOTHING,
) -> logging.Logger:
    """Start a script's job: its log records and an uncaught exception's traceback go to its
    log file (the logger is returned).

    ``gpus``: the job's ``gpu`` resource is locked (:func:`d2lrepro.core.gpu_locks.lock_gpus`)
    before anything starts CUDA, so that the GPUs this job gets become its cuda:0, cuda:1, ...
    and no other job's (given none, CUDA finds none); ``gpus="shared"``: a job that trains and
    times nothing a verdict depends on shares a GPU with at most ``jobs_per_gpu`` - 1 such jobs
    (:func:`d2lrepro.core.gpu_locks.lock_shared_gpu`). ``threads``: torch runs with the job's
    threads. Without either, this imports no torch, which would cost a job that needs none
    (the report) seconds.

    A job that declares a ``machines`` output records there the machines its numbers come
    from (:func:`d2lrepro.core.provenance.record_job`), after its GPU lock, so that the record is
    the machine as the job saw it: its own where it measures (it locks GPUs, sets its threads
    or summarizes nothing), and those of its ``machines`` inputs where it summarizes. A job
    whose ``workers`` (processes it starts) do its work on the GPUs leaves CUDA to them. A
    timing rule's ``params.ran_alone`` says whether the job had the machine to itself.

    A job whose shortfall of devices the run's plan found (:func:`shortfall`) is a light
    one. Where it still measures (``when_short``: :class:`WhenShort`), it does so on a share of
    a GPU, in its own process, with its threads, and records that it did not run alone;
    otherwise it measures nothing, so it starts no torch, locks no GPU and records the
    machine as a job given the GPUs the plan would have given it sees it
    (:func:`d2lrepro.core.environment.as_given`). A job whose time the plan found no claim can
    judge here (its ``unjudged`` resource says why: common.smk's unjudged_time) measures on a
    share of a GPU too, with its threads and its workers, and records that it did not run
    alone.
    """
    log = logs.setup(snakemake.log[0])
    if os.environ.get(job_server.CHILD):
        log.info("runs in process %d, forked from the job server %d", os.getpid(), os.getppid())
        # Snakemake's benchmark measures the process that waits for this one: the log says
        # what this one used.
        atexit.register(log_usage, log)
    else:
        log.info("runs in process %d, a Python of its own: %s", os.getpid(), job_server.why_here)
    ran_alone = snakemake.params.get("ran_alone")
    # what a job planned to share the machine records, where its rule times (passes ran_alone)
    beside_others = None if ran_alone is None else False
    short = shortfall(snakemake)
    unjudged = getattr(snakemake.resources, "unjudged", "")
    if short:
        log.info("not applicable here, as the run was planned: %s", short["reason"])
        measures = when_short is WhenShort.ONE_DEVICE or (
            when_short is WhenShort.ONE_GPU and short["gpus"]
        )
        if not measures:
            machine = json.loads(Path(snakemake.input.environment).read_text())
            provenance.record_job(
                snakemake.output.machines,
                [],
                measures=True,
                described=environment.as_given(machine, short["gpus"], snakemake.threads),
            )
            return log
        gpus, threads, workers, ran_alone = "shared", True, False, beside_others
    elif unjudged:
        log.info(
            "no claim judges its time here, as the run was planned (what it would be compared"
            " with %s): it trains beside other jobs",
            unjudged,
        )
        gpus, threads, ran_alone = "shared" if gpus else gpus, True, beside_others
    if gpus:
        from d2lrepro.core import gpu_locks

        if gpus == "shared":
            gpu_locks.lock_shared_gpu(snakemake.resources, snakemake.config["jobs_per_gpu"], log)
        else:
            gpu_locks.lock_gpus(snakemake.resources.gpu, log)
    if threads:
        import torch

        torch.set_num_threads(snakemake.threads)
    provenance.record_job(
        snakemake.output.get("machines"),
        snakemake.input.get("machines", []),
        measures=bool(gpus or threads),
        threads=snakemake.threads,
        workers=workers,
        ran_alone=ran_alone,
    )
    return log


def log_usage(log: logging.Logger) -> None:
    """Log this process's peak memory and CPU time, and its ended children's (a forked job's
    own use, which its benchmark file does not see)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    log.info(
        "used %.0f MiB at most and %.1f s of CPU; its ended child processes %.0f MiB at most"
        " and %.1f s of CPU",
        own.ru_maxrss / 1024,
        own.ru_utime + own.ru_stime,
        children.ru_maxrss / 1024,
        children.ru_utime + children.ru_stime,
    )


def shortfall(snakemake) -> dict:
    """What the run's plan found this job short of (its resources ``shortfall`` and
    ``shortfall_gpus``, from :func:`d2lrepro.pipeline.settings.planned_shortfall`):
    ``{"reason": ..., "gpus": the GPUs it would have locked}``, else ``{}``."""
    reason = getattr(snakemake.resources, "shortfall", "")
    return {"reason": reason, "gpus": snakemake.resources.shortfall_gpus} if reason else {}
