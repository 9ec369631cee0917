"""Benchmark: a preset's wall time on a machine of N cores and G GPUs, simulated from each job's
measured wall time and the workflow's own plan, beside the runs that measured the times.

    .venv/bin/python tests/schedule_estimate.py [--run LABEL JOBS PRESET CORES GPUS SECONDS]...
        [--estimate-jobs JOBS [--estimate-commit C]] [--estimate-preset P]
        [--assume JOB SECONDS]... [--assumed TSV] [--less JOB SECONDS]... [--light-seconds S]
        [--imports-seconds I]

JOBS is a run's benchmarks/ folder or a TSV of job and seconds (the GPU run's job-seconds.tsv);
SECONDS the run's measured wall time. Without --run it checks the first and the latest GPU runs
of the cpu preset on 16 cores and one H200 (../shared/evidence/h200-2026-11-26 and
docs/runs/h200-65c3da6-job-seconds.tsv), each planned by the commit that ran it. Then it prints
what the cpu preset would take on that machine as this tree plans it, from the first run's job
times: the jobs short of devices light, each taking S seconds (0.5 by default, what one took on
a 2-core machine); a job that does the work of several measured ones (all the airfoil settings
in one) their time with its start-up paid once; and, besides, with each job forked from the job
server, I seconds sooner than a job that starts its own Python and imports torch
(--imports-seconds: 1.63 by default, the GPU run's shortest job that imports torch, an upper
bound). With --estimate-jobs, the estimates take the job times of a run of this tree instead,
its light jobs as measured, and its jobs as they started there (the job server's saving only
where --imports-seconds is given). --less takes SECONDS off a job's time in the estimates: what
a change measured elsewhere is expected to save it; --assume gives a time to a job that run did
not finish (a run stopped part way), --assumed a table of them (job, seconds, and why each).
--estimate-preset plans another preset (the book's) on that
machine, from a run of it (--estimate-jobs). --estimate-commit names the commit whose run
measured those times: a job that its plan ran light (short of devices, it trained nothing) and
this tree's plan runs in full has no measured time, and needs one from --assume. A name --assume
or --less gives that the plan lacks is an error.

The plan is the workflow's own: a dry run of this tree as a machine of CORES cores and GPUS
GPUs would plan it (the Snakefile's GPU count faked), which gives each job's threads (a job
that times takes every core), its `gpu` and `gpu_share` and the jobs it waits for. The
simulation assumes: each job takes its measured time whatever runs beside it; the scheduler
starts, whenever a job ends, every waiting job whose inputs are done and whose threads and
GPUs are free, in the plan's order (by job name); jobs without a benchmark (data fetches, the
claims, the report) take no time, nor does Snakemake's own start (3 to 7 s in the GPU runs' logs).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EVIDENCE = REPO.parent / "shared" / "evidence" / "h200-2026-11-26"
SKIP = {".git", ".venv", ".snakemake", "results", "resources", "logs", "benchmarks", "__pycache__"}
# The GPU run's wall time: 6 min 28 s and 111 s in two calls (evidence README), 30 s of the
# first spent on a `hardware` job that the time limit stopped and the second ran again. It is
# planned by the commit that ran it.
H200_COMMIT = "658a16c"
H200_RUN = ("H200, cpu, 658a16c", EVIDENCE / "job-seconds.tsv", "cpu", 16, 1, 499.0, H200_COMMIT)
# The latest: the cpu preset in 3 min 55 s on the same kind of machine (docs/timings.md).
LATEST_JOBS = REPO / "docs" / "runs" / "h200-65c3da6-job-seconds.tsv"
LATEST_H200_RUN = ("H200, cpu, 65c3da6", LATEST_JOBS, "cpu", 16, 1, 235.0, "65c3da6")
# A light job of these rules still measures what one device can (the cost model's one-device
# example, the book's one-process code on one GPU): it keeps its measured time, an upper bound,
# where the others take --light-seconds.
MEASURES_WHEN_LIGHT = {"cost_model", "single_process"}
# What a job handed over to the job server takes at least: a script that does nothing took
# 0.15 to 0.28 s as a Snakemake job on the 2-core test machine.
HAND_OVER = 0.2
# What the job server saves a job on the GPU run's machine, at most: its shortest job that
# imports torch and pandas (prepare_airfoil, 1.63 s from the start of Python to its end).
H200_IMPORTS = 1.63

# Run by the planning process in a copy of the tree: the jobs a dry run plans, as JSON.
PLAN = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.scheduling.job_scheduler import JobScheduler
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

sys.path.insert(0, "workflow")
from d2lrepro.pipeline import settings

preset, cores, gpus = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
settings.local_gpus = lambda: gpus  # this machine, as the Snakefile sees it
try:  # a tree that plans the jobs short of devices: its cores too (not the GPU run's commit)
    from d2lrepro.core import shortfall

    shortfall.usable_cores = lambda: cores
except ImportError:
    pass
planned = {}
schedule = JobScheduler.schedule


def record(scheduler):
    if not planned:
        dag = scheduler.workflow.dag
        jobs = sorted(dag.needrun_jobs(), key=lambda j: (str(j.benchmark or j.rule.name), j.jobid))
        ids = {job: i for i, job in enumerate(jobs)}
        limits = scheduler.workflow.global_resources
        names = ("_cores", "gpu", "gpu_share")
        planned["limits"] = {k: getattr(limits.get(k), "value", None) for k in names}
        planned["jobs"] = [
            {
                "rule": job.rule.name,
                "benchmark": str(job.benchmark) if job.benchmark else None,
                "needs": {k: v for k, v in job.scheduler_resources.items() if k in names},
                "after": sorted(ids[d] for d in dag.dependencies[job] if d in ids),
                "light": bool(job.resources.get("shortfall")),
            }
            for job in jobs
        ]
    return schedule(scheduler)


JobScheduler.schedule = record
with SnakemakeApi(OutputSettings()) as api:
    workflow = api.workflow(
        snakefile=Path("Snakefile"),
        resource_settings=ResourceSettings(cores=cores),
        config_settings=ConfigSettings(config={"preset": preset}),
    )
    dag = workflow.dag(DAGSettings(forceall=True))
    dag.execute_workflow(executor="local", pseudo_executor="dryrun")
print("PLANNED", json.dumps(planned))
"""


@dataclass(frozen=True)
class Job:
    """A planned job: its name (its benchmark file under benchmarks/, without .tsv; else its
    rule's), its rule, what it holds while it runs (``_cores``, ``gpu``, ``gpu_share``), the
    indices of the jobs it waits for, and whether the plan found it short of devices (a light
    job that writes "not applicable")."""

    name: str
    rule: str
    needs: dict
    after: tuple = ()
    light: bool = False


def plan(preset: str, cores: int, gpus: int, commit: str = "") -> tuple[dict, list[Job]]:
    """The run's limits and jobs, as a dry run of this tree (of ``commit``, where named)
    plans them on a machine of ``cores`` cores and ``gpus`` GPUs (in a copy: the Snakefile
    records a results tree's preset)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "repo"
        if commit:
            tree.mkdir()
            tarball = subprocess.run(
                ["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", str(tree)], input=tarball.stdout, check=True)
        else:
            shutil.copytree(REPO, tree, ignore=lambda d, names: [n for n in names if n in SKIP])
        done = subprocess.run(
            [sys.executable, "-c", PLAN, preset, str(cores), str(gpus)],
            cwd=tree,
            capture_output=True,
            text=True,
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PLANNED ")]
    if done.returncode or not lines:
        sys.exit(f"the dry run failed:\n{done.stderr[-5000:]}")
    planned = json.loads(lines[-1].removeprefix("PLANNED "))
    jobs = [
        Job(
            name=(j["benchmark"] or j["rule"]).removeprefix("benchmarks/").removesuffix(".tsv"),
            rule=j["rule"],
            needs=j["needs"],
            after=tuple(j["after"]),
            light=j["light"],
        )
        for j in planned["jobs"]
    ]
    return planned["limits"], jobs


def measured(path: Path) -> dict[str, float]:
    """Each job's wall time: from a benchmarks/ folder (``s`` of each ``<job>.tsv``) or a TSV
    of ``job`` and ``seconds``."""
    if path.is_file():
        with open(path) as f:
            return {row["job"]: float(row["seconds"]) for row in csv.DictReader(f, delimiter="\t")}
    times = {}
    for tsv in path.rglob("*.tsv"):
        with open(tsv) as f:
            times[str(tsv.relative_to(path).with_suffix(""))] = float(
                next(csv.DictReader(f, delimiter="\t"))["s"]
            )
    return times


def job_time(job: Job, times: dict[str, float]) -> float:
    """``job``'s time in ``times``; for a job that does the work of several measured ones
    (``<name>/...``, the per-setting jobs of an older plan), their sum with the start-up paid
    once (their shortest time, an upper bound on it, counted once); 0 where none was
    measured."""
    if job.name in times:
        return times[job.name]
    parts = [t for name, t in times.items() if name.startswith(f"{job.name}/")]
    return sum(parts) - (len(parts) - 1) * min(parts) if parts else 0.0


def measures_nothing(job: Job) -> bool:
    """Whether ``job`` is light and measures nothing (it writes "not applicable")."""
    return job.light and job.rule not in MEASURES_WHEN_LIGHT


def estimated(jobs: list[Job], times: dict[str, float], light_seconds: float | None) -> list[float]:
    """Each job's time as this tree plans it, from ``times``: a light job that measures nothing
    takes ``light_seconds`` (where the times come from an older plan, whose jobs short of
    devices held the machine), else its measured time."""
    return [
        light_seconds if light_seconds is not None and measures_nothing(j) else job_time(j, times)
        for j in jobs
    ]


def simulate(jobs: list[Job], seconds: list[float], limits: dict) -> float:
    """The wall time of ``jobs``, each taking ``seconds``, on a machine of ``limits`` (at most
    this much of each resource at once; None: no limit): list scheduling. Whenever a job ends,
    every job whose jobs to wait for are done and whose needs fit what is free starts, in the
    order of ``jobs``; a job never asks for more than the machine has (as Snakemake caps
    threads at the cores)."""
    limits = {k: v for k, v in limits.items() if v is not None}
    free = dict(limits)
    waiting = {i: set(job.after) for i, job in enumerate(jobs)}
    running: list[tuple[float, int]] = []
    now = 0.0

    def needs(i):
        return {k: min(jobs[i].needs.get(k, 0), limit) for k, limit in limits.items()}

    while waiting or running:
        for i in [i for i, after in waiting.items() if not after]:
            if all(v <= free[k] for k, v in needs(i).items()):
                free = {k: free[k] - v for k, v in needs(i).items()}
                heapq.heappush(running, (now + seconds[i], i))
                del waiting[i]
        if not running:
            raise ValueError(f"jobs that cannot start: {sorted(jobs[i].name for i in waiting)}")
        now = running[0][0]
        while running and running[0][0] == now:
            _, i = heapq.heappop(running)
            free = {k: free[k] + v for k, v in needs(i).items()}
            for after in waiting.values():
                after.discard(i)
    return now


def less(times: dict[str, float], cuts: list[tuple[str, str]]) -> dict[str, float]:
    """``times`` with each job of ``cuts`` (job, seconds) that many seconds shorter, at least
    0; a job not in ``times`` is an error, since nothing would be taken off."""
    times = dict(times)
    for job, seconds in cuts:
        if job not in times:
            raise ValueError(f"--less {job}: no time measured for it")
        times[job] = max(times[job] - float(seconds), 0.0)
    return times


def trained_nothing_then(then: list[Job], now: list[Job]) -> list[str]:
    """The jobs of ``now`` (this tree's plan) that ``then`` (the plan of the commit whose run
    measured the times) ran light: there they wrote "not applicable" and trained nothing, so
    the time measured is not the time of the job this tree runs."""
    light = {job.name for job in then if job.light}
    return sorted(job.name for job in now if job.name in light and not job.light)


def assume(times: dict[str, float], guesses: list[tuple[str, str]]) -> dict[str, float]:
    """``times`` with a time for each job of ``guesses`` (job, seconds) that the run did not
    finish; a job it measured is an error, since a guess would hide the measurement."""
    times = dict(times)
    for job, seconds in guesses:
        if job in times:
            raise ValueError(f"{job}: the run measured it ({times[job]:g} s)")
        times[job] = float(seconds)
    return times


def forked(jobs: list[Job], seconds: list[float], imports: float) -> list[float]:
    """The job times ``seconds`` as jobs forked from the job server take them: each job
    ``imports`` seconds sooner (the Python start and imports the server paid once), and at
    least :data:`HAND_OVER`. Light jobs import nothing heavy: they keep their time."""
    return [s if j.light else max(s - imports, HAND_OVER) for j, s in zip(jobs, seconds)]


def _time(seconds: float) -> str:
    return f"{seconds:.0f} s ({int(seconds // 60)} min {seconds % 60:02.0f} s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--run",
        nargs=6,
        action="append",
        metavar=("LABEL", "JOBS", "PRESET", "CORES", "GPUS", "SECONDS"),
        help="a measured run of this tree to check the simulation against (repeatable)",
    )
    parser.add_argument(
        "--imports-seconds",
        type=float,
        help="what the job server saves each job there (at most its shortest torch job);"
        f" default: {H200_IMPORTS} where the estimates take the first GPU run's times",
    )
    parser.add_argument(
        "--estimate-jobs",
        type=Path,
        metavar="JOBS",
        help="job times of a run of this tree for the estimates (a benchmarks/ folder or a TSV"
        " of job and seconds), its light jobs at their measured times; default: the first GPU"
        " run's, planned by its commit",
    )
    parser.add_argument(
        "--less",
        nargs=2,
        action="append",
        default=[],
        metavar=("JOB", "SECONDS"),
        help="take SECONDS off JOB's time in the estimates (repeatable)",
    )
    parser.add_argument(
        "--assume",
        nargs=2,
        action="append",
        default=[],
        metavar=("JOB", "SECONDS"),
        help="a time for a job the estimates' run did not finish (repeatable)",
    )
    parser.add_argument(
        "--assumed",
        type=Path,
        metavar="TSV",
        help="a table of --assume's times: job, seconds (and why each, which is not read)",
    )
    parser.add_argument(
        "--estimate-preset",
        default=H200_RUN[2],
        help=f"the preset the estimates plan (default: {H200_RUN[2]}; another needs"
        " --estimate-jobs from a run of it)",
    )
    parser.add_argument(
        "--estimate-commit",
        help="the commit whose run measured --estimate-jobs: a job its plan ran light that this"
        " tree runs in full needs a time from --assume",
    )
    parser.add_argument(
        "--light-seconds",
        type=float,
        default=0.5,
        help="what a light job takes in the estimate (one took 0.47 s on a 2-core machine)",
    )
    args = parser.parse_args()
    tabled = {job: str(t) for job, t in measured(args.assumed).items()} if args.assumed else {}
    # a job given both ways takes the command line's time
    guesses = list((tabled | dict(args.assume)).items())
    if args.estimate_preset != H200_RUN[2] and not args.estimate_jobs:
        parser.error(f"--estimate-preset {args.estimate_preset} needs --estimate-jobs")
    if args.estimate_commit and not args.estimate_jobs:
        parser.error("--estimate-commit needs --estimate-jobs")
    runs = [(*run, "") for run in args.run] if args.run else [H200_RUN, LATEST_H200_RUN]
    print(f"{'run':<24} {'jobs':>4} {'measured':>18} {'simulated':>18} {'error':>6}")
    for label, source, preset, cores, gpus, wall, commit in runs:
        if not Path(source).exists():
            sys.exit(f"no job times at {source}")
        limits, jobs = plan(preset, int(cores), int(gpus), commit)
        times = measured(Path(source))
        simulated = simulate(jobs, [times.get(job.name, 0.0) for job in jobs], limits)
        wall = float(wall)
        print(
            f"{label:<24} {len(jobs):>4} {_time(wall):>18} {_time(simulated):>18}"
            f" {simulated / wall - 1:>+6.0%}"
        )
        unmeasured = ", ".join(sorted({j.rule for j in jobs if j.name not in times}))
        at = f" at {commit}" if commit else ""
        print(f"  on {cores} cores and {gpus} GPUs{at}; no time measured (0 s): {unmeasured}")
    label, source, _, cores, gpus, _, _ = H200_RUN
    preset = args.estimate_preset
    if args.estimate_jobs:
        label, source = str(args.estimate_jobs), args.estimate_jobs
        if args.estimate_commit:
            label += f", measured at {args.estimate_commit}"
    limits, jobs = plan(preset, cores, gpus)
    planned = {job.name for job in jobs}
    named = [(f"--assumed {args.assumed}:", job) for job in tabled]
    named += [("--assume", job) for job, _ in args.assume]
    named += [("--less", job) for job, _ in args.less]
    for option, job in named:
        if job not in planned:
            sys.exit(f"{option} {job}: the {preset} preset plans no such job")
    times = measured(source)
    if args.estimate_commit:
        void = trained_nothing_then(plan(preset, cores, gpus, args.estimate_commit)[1], jobs)
        missing = [job for job in void if job not in dict(guesses)]
        if missing:
            sys.exit(
                f"these jobs trained nothing in the run of {args.estimate_commit} (its plan ran"
                f" them light) and this tree runs them: give each a time with --assume:"
                f" {', '.join(missing)}"
            )
        times = {job: t for job, t in times.items() if job not in void}
    try:
        times = less(assume(times, guesses), args.less)
    except ValueError as error:
        sys.exit(
            f"{error}; an assumed time is for a job the run did not finish, or one its plan ran"
            " light (--estimate-commit names the commit whose plan that was)"
        )
    light_seconds = None if args.estimate_jobs else args.light_seconds
    imports = args.imports_seconds
    if imports is None and not args.estimate_jobs:
        imports = H200_IMPORTS
    light = estimated(jobs, times, light_seconds)
    unmeasured = ", ".join(sorted({j.name for j, t in zip(jobs, light) if not t}))
    idle = sum(map(measures_nothing, jobs))
    lights = f"{idle} taking {light_seconds} s each" if light_seconds else "as measured"
    changes = "".join(f", {job} {float(seconds):g} s assumed" for job, seconds in args.assume)
    kept = len(set(tabled) - set(dict(args.assume)))
    changes += f", the assumed times of {args.assumed} ({kept} jobs)" if tabled else ""
    changes += "".join(f", {job} {float(seconds):g} s shorter" for job, seconds in args.less)
    print(
        f"Estimates: the {preset} preset on {cores} cores and {gpus} GPU"
        f" (job times: {label}{changes}),"
        f" as this tree plans it, {sum(j.light for j in jobs)} light jobs ({lights}):"
        f" {_time(simulate(jobs, light, limits))}"
        + (
            f"; with the job server, each job {imports} s sooner:"
            f" {_time(simulate(jobs, forked(jobs, light, imports), limits))}"
            if imports is not None
            else ""
        )
    )
    print(f"  {len(jobs)} jobs; no time (0 s): {unmeasured or 'none'}")


if __name__ == "__main__":
    main()
