import os
import re
import sys
from pathlib import Path

# Scripts import the package from the workflow directory, whichever Python runs them (the
# project's virtual environment, or a conda environment made with --sdm conda).
PACKAGE_DIR = str(Path(workflow.basedir) / "workflow")
sys.path.insert(0, PACKAGE_DIR)
os.environ.update(
    PYTHONPATH=os.pathsep.join(
        filter(None, [PACKAGE_DIR, os.environ.get("PYTHONPATH")])
    )
)

import pandas as pd
from snakemake.exceptions import WorkflowError
from snakemake.utils import Paramspace

from d2lrepro.pipeline import (
    archive,
    claims,
    code_inputs,
    job_server,
    settings,
    stopping,
)
from d2lrepro.core import fetch, gpu_locks, paths, provenance
from d2lrepro.core.shortfall import usable_cores

ENV = "../../envs/d2lrepro.yaml"

# Validation happens here, at parse time: a bad config stops before any job runs. A results
# tree keeps the preset its first run recorded (`auto` takes it; another explicit preset stops).
# What --configfile or --config change of the project's config.yaml is a deviation from the book.
SETTINGS = settings.for_run(config)


# Jobs run in children of one process that imported torch once, where they run here in this
# Python (not in a conda environment or a container of their own).
JOB_SERVER = {}


onstart:
    # Snakemake's SIGTERM handler waits for good on a lock that the main thread it interrupted
    # may hold: it runs in a thread of its own (d2lrepro.pipeline.stopping).
    stopping.sigterm_in_a_thread()
    settings.record_preset(SETTINGS.preset, paths.PRESET)
    if S["job_server"] and job_server.wanted(workflow):
        JOB_SERVER["process"] = job_server.start(paths.JOB_SERVER_LOG)


onsuccess:
    job_server.stop(JOB_SERVER.get("process"))


onerror:
    job_server.stop(JOB_SERVER.get("process"))


S = SETTINGS.values
# This run's archive: config archive_name, else run-<host>-<date>-<id>.zip (<id>: random, so that
# two trees of one host and day differ), named by the first run of the results tree and recorded
# with it (a name that changed with the day would rerun it).
ARCHIVE = str(
    paths.RESULTS / archive.name(S["archive_name"], record=paths.ARCHIVE_NAME)
)

LEDGER = claims.load(paths.LEDGER)
# What every timing and figure footer is read against.
ENVIRONMENT = str(paths.ENVIRONMENT)


def code(script):
    """The package modules that workflow/scripts/<script>.py imports, directly or not, as
    inputs: editing one reruns exactly the rules that run it."""
    return code_inputs.closure(paths.SCRIPTS / f"{script}.py", workflow.basedir)


# Each section's category of `snakemake --report`, numbered so that it sorts in the book's order.
SECTION_TITLES = claims.section_categories(LEDGER)


# Whether a job that times runs alone: its rule passes this on (params.ran_alone) to the
# record of its machine, by which the claims it measures are judged, or not.
TIMINGS_ALONE = S["timings_alone"]


def timing_threads(wildcards):
    """Every core of the run, so that nothing runs beside a timing (threads: workflow.cores);
    1 where timings need not run alone (timings_alone: false), and for calls that run no job
    and give no core count, such as --report."""
    if not TIMINGS_ALONE:
        return 1
    try:
        return workflow.cores
    except WorkflowError:
        return 1


# Snakemake runs at most one timing job per GPU of this machine: its GPU count is the `gpu`
# resource unless `--resources gpu=N` says otherwise, and each job locks GPUs of its own
# (gpu_locks.lock_gpus). Jobs that only train share a GPU, jobs_per_gpu at a time: they ask for
# a `gpu_share` instead, of which the run has N GPUs x jobs_per_gpu, and never run beside a
# timing job, which takes every core (its claim would wait for theirs to end besides). The
# Snakefile is parsed before the executor is known, so a cluster's login node counts as "this
# machine" too; without GPUs it limits nothing.
MACHINE_GPUS = settings.local_gpus()
# A job that a cluster executor submitted runs in Snakemake's remote mode, where its
# allocation is its lock; a run started by hand inside an allocation still locks.
if workflow.remote_exec:
    os.environ[gpu_locks.SUBMITTED] = "1"
if MACHINE_GPUS and "gpu" not in workflow.global_resources:
    workflow.register_resource("gpu", MACHINE_GPUS)
# What the run may use at once: --resources gpu=N, else the machine's GPUs (None: no limit).
GPU_LIMIT = workflow.global_resources.get("gpu").value
if MACHINE_GPUS and "gpu_share" not in workflow.global_resources:
    # on no more GPUs than there are: each holds jobs_per_gpu (gpu_locks.lock_gpus)
    workflow.register_resource(
        "gpu_share", min(GPU_LIMIT, MACHINE_GPUS) * S["jobs_per_gpu"]
    )
SHARE_LIMIT = workflow.global_resources.get("gpu_share").value


def needs(mem_mb, runtime, gpus=0, shared=False):
    """What a job asks of a scheduler besides its threads: memory (MB), wall time (minutes)
    and GPUs (a number, or a function of the wildcards; see settings.gpu_request), or, for a
    job that trains on one GPU and times nothing (``shared``: True, or a function of the
    wildcards that says so), a share of one (see settings.shared_gpu_request)."""

    def shared_request():
        # Evaluated as the jobs are planned, when the executor is known.
        return settings.shared_gpu_request(
            machine_gpus=MACHINE_GPUS,
            book=SETTINGS.preset == "book",
            limit=GPU_LIMIT,
            share_limit=SHARE_LIMIT,
            local=workflow.local_exec,
        )

    def request(wanted):
        return settings.gpu_request(
            wanted,
            machine_gpus=MACHINE_GPUS,
            book=SETTINGS.preset == "book",
            limit=GPU_LIMIT,
        )

    def gpu(wildcards):
        if of_wildcards(shared, wildcards):
            return shared_request()["gpu"]
        return request(of_wildcards(gpus, wildcards))

    def gpu_share(wildcards):
        return shared_request()["gpu_share"] if of_wildcards(shared, wildcards) else 0

    if not (shared or callable(gpus)):
        return {"mem_mb": mem_mb, "runtime": runtime, "gpu": request(gpus)}
    return {"mem_mb": mem_mb, "runtime": runtime, "gpu": gpu, "gpu_share": gpu_share}


def jobs_run_here():
    """Whether the run's jobs run on this machine: not submitted to a cluster by this run, nor
    run by a cluster's node."""
    return workflow.local_exec and not workflow.remote_exec


def only_here(path):
    """An input function: ``path`` where the run's jobs run on this machine, else nothing
    (evaluated as the jobs are planned, when the executor is known)."""
    return lambda wildcards: path if jobs_run_here() else []


def shortfall_of(workers, cuda=0, share=False):
    """A function of a job's wildcards: why the job cannot run its ``workers`` devices (a
    number, or a function of the wildcards), at least ``cuda`` of them GPUs, or, where they may
    ``share`` GPUs, on the GPUs it would lock, on one node here, as the run is planned
    (settings.planned_shortfall: {"reason", "gpus"}, else {}). Such a
    job takes one core (see when_short) and writes "not applicable here" for what it lacks:
    without torch or a GPU, or, where it still measures what one device can (job.start's
    when_short), on a share of a GPU. A job submitted to a cluster decides on its node.
    """

    def shortfall(wildcards):
        return settings.planned_shortfall(
            of_wildcards(workers, wildcards),
            machine_gpus=MACHINE_GPUS,
            limit=GPU_LIMIT,
            cores=usable_cores(),
            here=jobs_run_here(),
            cuda=cuda,
            share=share,
        )

    return shortfall


def unjudged_time(compared, jobs):
    """A function of a job's wildcards: why no claim can judge here the time of a job that
    ``jobs`` (a function of the wildcards) picks, "" where one may: every timing its time is
    compared with needs what this machine lacks as the run is planned (``compared``, a
    shortfall_of, finds it; this returns its reason). Such a job measures, but as jobs that
    time nothing do: on one core and a share of a GPU where there is one (needs(...,
    shared=...)), beside other jobs, and its record says it did not run alone (job.start
    reads the reason as its `unjudged` resource). A job submitted to a cluster times alone.
    """
    return lambda wildcards: (
        compared(wildcards).get("reason", "") if jobs(wildcards) else ""
    )


def shortfall_resources(shortfall):
    """What the job's script reads of its ``shortfall`` (see shortfall_of): the reason ("" where
    there is none) and the GPUs the job would have locked. Resources, not params: a plan that
    changes with the host must not rerun what another host measured."""
    return {
        "shortfall": lambda wildcards: shortfall(wildcards).get("reason", ""),
        "shortfall_gpus": lambda wildcards: shortfall(wildcards).get("gpus", 0),
    }


def when_short(shortfall, light, otherwise):
    """A function of a job's wildcards: ``light`` for a job whose ``shortfall`` (see
    shortfall_of) the plan found, else ``otherwise`` (a value, or a function of the
    wildcards)."""
    return lambda wildcards: (
        light if shortfall(wildcards) else of_wildcards(otherwise, wildcards)
    )


def of_wildcards(value, wildcards):
    return value(wildcards) if callable(value) else value


def machines_of(path):
    """The records of the machines that measured the numbers of ``path``, beside it
    (core.provenance): an output of the job that writes ``path``, an input of those that read
    it. The opening of every script writes it."""
    return str(provenance.sidecar(path))


def figure(section, name):
    """Figure ``name`` of ledger section ``section``, also flagged for `snakemake --report`
    (under the section's caption, or the generic one where it has none)."""
    return report(
        str(paths.figure(section, name)),
        caption=str(paths.caption(section)),
        category=SECTION_TITLES[section],
        labels={"figure": name},
    )


def claims_table(section):
    """The claims page of ledger section ``section``, flagged for `snakemake --report` in the
    section's category: every section shows there, those without a figure too."""
    return report(
        str(paths.claims_table(section)),
        caption="../../report/captions/section_claims.rst",
        category=SECTION_TITLES[section],
        labels={"table": "claims"},
    )


def run_figures(names):
    """Figures named by ledger ids (section.name), keyed by id."""
    return {n: figure(*n.split(".", 1)) for n in names}


# Archives come from other machines: each is read and checked in full here, so that a bad
# one stops the workflow, naming the file, before any job runs.
for path in S["compare_with"]:
    try:
        archive.read(path)
    except archive.ArchiveError as error:
        raise WorkflowError(f"config compare_with: {error}") from error


def compared(wildcards):
    """The archives rule compare sets side by side (config compare_with)."""
    if not S["compare_with"]:
        raise WorkflowError(
            "compare sets archives side by side; name them with"
            " --config compare_with='[a.zip, b.zip]'"
        )
    return S["compare_with"]


# What each chapter's rules register for the report's rules, so that these name no
# experiment: the histories (seconds per epoch) of the runs of each setting a preset scales (a
# scaled claim says how long training at the book's scale would take here, at their rates),
# and the tables its figures draw besides the evidence the ledger names (what rule compare
# draws again, what a reader of the archive can plot).
TIMED = {}
CURVES = []
