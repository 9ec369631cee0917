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

from d2lrepro.pipeline import archive, claims, code_inputs, settings
from d2lrepro.core import fetch, paths
from d2lrepro.optimization import schedulers

ENV = "../../envs/d2lrepro.yaml"

# Validation happens here, at parse time: a bad config stops before any job runs.
# `auto` is decided by the first run and recorded with its results (delete the file to decide
# again, e.g. after moving the tree to a machine with a GPU).
SETTINGS = settings.resolve(config, record=Path("results/auto_preset.txt"))
S = SETTINGS.values
# This run's archive: config archive_name, else run-<host>-<date>.zip, named by the first run
# of the results tree and recorded with it (a name that changed with the day would rerun it).
ARCHIVE = str(
    paths.RESULTS / archive.name(S["archive_name"], record=paths.ARCHIVE_NAME)
)

LEDGER = claims.load(Path(workflow.basedir) / "workflow" / "claims.yaml")


def code(script):
    """The package modules that workflow/scripts/<script>.py imports, directly or not, as
    inputs: editing one reruns exactly the rules that run it."""
    path = Path(workflow.basedir) / "workflow" / "scripts" / f"{script}.py"
    return code_inputs.closure(path, workflow.basedir)


SECTION_TITLES = {
    s["id"]: f"{i}. {s['title']}" for i, s in enumerate(LEDGER["sections"], 1)
}


def all_cores(wildcards):
    """Every core of the run, so that nothing runs beside a timing (threads: workflow.cores);
    1 for calls that run no job and give no core count, such as --report."""
    try:
        return workflow.cores
    except WorkflowError:
        return 1


# Snakemake runs at most one job per GPU of this machine: its GPU count is the `gpu` resource
# unless `--resources gpu=N` says otherwise, and each job claims GPUs of its own
# (devices.claim_gpus). The Snakefile is parsed before the executor is known, so a cluster's
# login node counts as "this machine" too; without GPUs it limits nothing.
MACHINE_GPUS = settings.local_gpus()
if MACHINE_GPUS and "gpu" not in workflow.global_resources:
    workflow.register_resource("gpu", MACHINE_GPUS)
# What the run may use at once: --resources gpu=N, else the machine's GPUs (None: no limit).
GPU_LIMIT = workflow.global_resources.get("gpu").value


def needs(mem_mb, runtime, gpus=0):
    """What a job asks of a scheduler besides its threads: memory (MB), wall time (minutes)
    and GPUs (a number, or a function of the wildcards; see settings.gpu_request)."""

    def request(wanted):
        return settings.gpu_request(
            wanted,
            machine_gpus=MACHINE_GPUS,
            book=SETTINGS.preset == "book",
            limit=GPU_LIMIT,
        )

    return {
        "mem_mb": mem_mb,
        "runtime": runtime,
        "gpu": (
            (lambda wildcards: request(gpus(wildcards)))
            if callable(gpus)
            else request(gpus)
        ),
    }


def run_devices(wildcards):
    """The devices of multi-device run ``wildcards.run``."""
    return S["data_parallel"]["runs"][wildcards.run]["devices"]


def spanning_nodes(wildcards):
    """The nodes of multi-device run ``wildcards.run`` if it spans several, else None (no
    such resource): SLURM then allocates them with one task (a torchrun agent) per node, and
    the `mpi` resource tells the executor that the job starts its tasks itself (srun).
    """
    nodes = S["data_parallel"]["runs"][wildcards.run]["nodes"]
    return nodes if nodes > 1 else None


def figure(section, name):
    """Figure ``name`` of ledger section ``section``, also flagged for `snakemake --report`
    (under the section's caption, or the generic one where it has none)."""
    return report(
        str(paths.figure(section, name)),
        caption=str(paths.caption(section)),
        category=SECTION_TITLES[section],
        labels={"figure": name},
    )


def run_figures(names):
    """Figures named by ledger ids (section.name), keyed by id."""
    return {n: figure(*n.split(".", 1)) for n in names}


def plain(value):
    """numpy scalars (as Paramspace and pandas hand them out) as Python values for params."""
    return value.item() if hasattr(value, "item") else value


LR_RUNS = list(schedulers.EXPERIMENTS)
MULTIGPU_MODELS = sorted({run["model"] for run in S["data_parallel"]["runs"].values()})


def lr_runs():
    """Every (run, semantics, seed); a constant lr has no schedule to apply late."""
    lr = S["lr_schedules"]
    pairs = [("constant", "book")] + [
        (r, s) for r in LR_RUNS[1:] for s in lr["semantics"]
    ]
    return [
        f"results/optimization/lr_schedules/runs/{r}.{s}.seed{seed}.csv"
        for r, s in pairs
        for seed in lr["seeds"]
    ]


WARMUP_VARIANTS = ["none", "linear"]


def warmup_runs():
    """One output per peak lr of the warm-up sweep and variant (all seeds in one job)."""
    return [
        f"results/optimization/warmup_sweep/runs/lr{lr}.{variant}.csv"
        for lr in S["warmup_sweep"]["lrs"]
        for variant in WARMUP_VARIANTS
    ]


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
