"""Benchmark: the GPU check. On a machine with CUDA, in at most 9 minutes on one GPU: the CUDA
tests (``pytest -m cuda``), ResNet-18 on all of Fashion-MNIST at the book's batch size in one
worker, and at the 2-device run's in 2 workers sharing one GPU (as the ``book`` preset trains
its 2-device runs on a machine with one GPU: their time, which no run has measured), and
the GPU experiments of the ``cpu`` preset through Snakemake in a scratch copy of the
repository (never the user's results tree).

    .venv/bin/python tests/gpu_check.py [--dry-run] [--whole-preset] [--mirror ../shared/data]
        [--out-dir .]

Each part runs in processes of its own under a time limit; one that fails or runs out of time
is recorded, and the next still runs. The experiments go last and take what is left of the 9
minutes. Everything lands in one folder, ``gpu-check-<host>-<date>-<id>/``: each part's log,
the experiments' metrics CSVs and machine records, each job's wall time, ResNet-18's epochs,
and ``summary.md``, whose rows go into docs/timings.md as they are. Without CUDA it stops at
once (exit 2); ``--dry-run`` prints the plan anywhere. Exit 1 when a part did not end well.

With ``--whole-preset`` it times the whole ``cpu`` preset instead (every rule, the claims and
the report, fetching its own data), first, within 6.5 minutes, then runs the CUDA tests, and
leaves ResNet-18 out, in at most 9.5 minutes: the check of the preset's wall time there.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

from d2lrepro.core import data, devices, environment, fetch, paths
from d2lrepro.multidevice.parts import launcher, worker
from d2lrepro.pipeline import settings

REPO = Path(__file__).resolve().parents[1]
SKIP = {".git", ".venv", ".snakemake", "results", "resources", "logs", "benchmarks", "__pycache__"}
TOTAL_S = 540
# Seconds a part stopped at its limit has to end its jobs before they are killed.
GRACE_S = 15
# The rules whose jobs lock a GPU of their own (``gpus=`` in workflow/rules/*.smk), besides
# data_parallel_run, whose runs are picked by the devices they need.
GPU_RULES = (
    "hybridize",
    "asynchrony",
    "autopar",
    "hardware",
    "cost_model",
    "parameter_server",
    "single_process",
)
# The book's 1-device ResNet-18 run (config.yaml, data_parallel.runs.resnet18.1), for two
# epochs: the first pays one-off set-up (cuDNN's choice of kernels), the second does not.
RESNET = ["--model", "resnet18", "--batch-size", "256", "--lr", "0.1", "--epochs", "2"]
# The book's 2-device ResNet-18 run (data_parallel.runs.resnet18.2) for one epoch, its 2 workers
# sharing one GPU over gloo, as the workflow's launcher runs them on a machine with one GPU.
SHARED_RESNET = ["--model", "resnet18", "--batch-size", "512", "--lr", "0.2", "--epochs", "1"]
# Where rule prepare_fashion_mnist puts the data.
FASHION_MNIST = paths.RESULTS / "data" / "fashion_mnist.pt"
OK = "ok"
RESNET_PART = "ResNet-18, all of Fashion-MNIST, batch 256, 2 epochs"
SHARED_PART = "ResNet-18, all of Fashion-MNIST, batch 512, 1 epoch, 2 workers sharing one GPU"
GPU_RUNS = "the GPU experiments of the `cpu` preset"
WHOLE_RUN = "the whole `cpu` preset"
# The whole preset's limit (about 6.5 min there, without the job server); the check with it
# takes at most WHOLE_TOTAL_S, so that the CUDA tests (150 s) and the stops' grace fit after it.
WHOLE_S = 390
WHOLE_TOTAL_S = 570


@dataclass
class Part:
    name: str
    command: list[str]
    cwd: Path
    log: str  # its file in the output folder
    limit: float | None  # seconds; None: what is left of TOTAL_S
    needs: str  # the module it runs
    result: Callable[[Path], str]  # what it found, in a line, from the output folder
    env: dict = field(default_factory=dict)  # set for it, besides the check's environment

    def shown(self) -> str:
        """Its command as a shell would run it, with the variables it sets."""
        return shlex.join([*(f"{k}={v}" for k, v in self.env.items()), *self.command])


@dataclass
class Outcome:
    name: str
    limit: float | None
    # OK, "failed (exit N)", "failed: why", "skipped: why", or "stopped at its N s limit; " and
    # how the part ended: "ended N s after SIGTERM", "killed, still running N s after SIGTERM"
    status: str
    seconds: float
    result: str = ""


def data_parallel_targets(gpus: int) -> list[str]:
    """The history files of the ``cpu`` preset's data-parallel runs that ``gpus`` GPUs can
    hold (the others would only record that they are not applicable)."""
    config = yaml.safe_load((REPO / "config.yaml").read_text()) | {"preset": "cpu"}
    spec = settings.resolve(config, cuda_available=True).values["data_parallel"]
    experiment = paths.experiment("multidevice", "data_parallel")
    return [
        str(experiment / paths.run_file(name, seed))
        for name, run in spec["runs"].items()
        if run and run["devices"] <= gpus
        for seed in spec["seeds"]
    ]


def pytest_tally(out: Path) -> str:
    """pytest's closing tally in its log, e.g. "2 failed, 14 passed, 8 skipped ... in 116.76s"."""
    found = re.findall(r"^=+ (.*? in [\d.]+s\b.*?) =+$", (out / "pytest.log").read_text(), re.M)
    return found[-1] if found else ""


def snakemake_steps(out: Path) -> str:
    """How far Snakemake got, by its log: e.g. "12 of 12 steps done"; how long after the start
    time it prints its first job began (reading the workflow and planning; both times in whole
    seconds); and why the job server did not start where it did not (its jobs then started
    their own Python)."""
    log = (out / "snakemake.log").read_text()
    found = re.findall(r"^(\d+ of \d+ steps) \(\d+%\) done", log, re.M)
    said = [f"{found[-1]} done" if found else "no step done"]
    start = re.search(r"^\s*Date: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)$", log, re.M)
    first = re.search(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$", log, re.M)
    if start and first:
        began = datetime.strptime(first[1], "%a %b %d %H:%M:%S %Y")  # time.asctime's
        waited = (began - datetime.fromisoformat(start[1])).total_seconds()
        said.append(f"the first job {waited:.0f} s after Snakemake's start")
    refused = re.findall(r"^job server not started \((.*)\): each job", log, re.M)
    if refused:
        said.append(f"job server not started: {refused[-1]}")
    return "; ".join(said)


def verdicts(claims: Path) -> str:
    """What a run's claims found, from its claims.csv: e.g. "107 claims: 59 reproduced, 40 not
    applicable here"."""
    with open(claims) as f:
        counts = Counter(row["verdict"] for row in csv.DictReader(f))
    found = ", ".join(f"{n} {verdict}" for verdict, n in counts.most_common())
    return f"{sum(counts.values())} claims: {found}"


def resnet_epochs(out: Path, name: str = "resnet18.csv") -> str:
    """Each epoch of the history ``name`` in ``out``: its time, images/s over the epoch and
    from its second batch on, and the test accuracy after it."""
    history = out / name
    if not history.exists():
        return ""
    with open(history) as f:
        rows = list(csv.DictReader(f))
    return "; ".join(
        f"epoch {r['epoch']}: {float(r['seconds']):.2f} s, {float(r['samples_per_s']):,.0f}"
        f" images/s ({float(r['steady_samples_per_s']):,.0f} from its second batch),"
        f" test accuracy {float(r['test_acc']):.3f}"
        for r in rows
    )


def plan(
    scratch: Path, out: Path, mirror: Path | None, gpus: int, whole: bool = False
) -> list[Part]:
    """The parts, in the order they run: ``scratch`` is the copy of the repository the
    experiments run in, ``out`` the output folder; ``whole``: the whole preset, first, and the
    CUDA tests, in place of the GPU experiments and ResNet-18."""
    python = sys.executable
    pytest = [python, "-m", "pytest", "-m", "cuda", "-v"]
    on_data = ["--data", str(scratch / FASHION_MNIST)]
    resnet = [python, "-m", worker.__name__, *RESNET, *on_data, "--out", str(out / "resnet18.csv")]
    shared_args = [*SHARED_RESNET, *on_data, "--out", str(out / "resnet18-shared.csv")]
    # as the workflow's launcher starts the workers
    shared = [python, "-m", "torch.distributed.run"]
    shared += launcher.torchrun_argv(worker, 2, shared_args)
    first_gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    # the job's 2 threads, a core for each worker (torchrun would set 1 where none is set)
    sharing = {devices.SHARE_GPUS: "1", "CUDA_VISIBLE_DEVICES": first_gpu, "OMP_NUM_THREADS": "2"}
    targets = [] if whole else [*GPU_RULES, *data_parallel_targets(gpus)]
    experiments = [python, "-m", "snakemake", *targets]
    experiments += ["--cores", "all", "--keep-going", "--config", "preset=cpu"]
    experiments += [f"data_mirror={mirror}"] if mirror else []
    # Snakemake's default scheduler solves with pulp; without it, its greedy one serves.
    experiments += ["--scheduler", "greedy"] if importlib.util.find_spec("pulp") is None else []
    tests = Part("`pytest -m cuda`", pytest, REPO, "pytest.log", 150, "pytest", pytest_tally)
    if whole:
        preset = Part(
            WHOLE_RUN, experiments, scratch, "snakemake.log", WHOLE_S, "snakemake", snakemake_steps
        )
        return [preset, tests]
    return [
        tests,
        Part(RESNET_PART, resnet, scratch, "resnet18.log", 90, "torch", resnet_epochs),
        Part(
            SHARED_PART,
            shared,
            scratch,
            "resnet18-shared.log",
            60,
            "torch",
            lambda out: resnet_epochs(out, "resnet18-shared.csv"),
            sharing,
        ),
        Part(GPU_RUNS, experiments, scratch, "snakemake.log", None, "snakemake", snakemake_steps),
    ]


def prepare_data(scratch: Path, mirror: Path | None) -> Outcome:
    """Fashion-MNIST fetched and prepared in ``scratch`` where Snakemake's data rules put it,
    for the ResNet-18 epochs and the experiments."""
    start = time.monotonic()
    specs = [s for s in fetch.FILES.values() if s.mirror_path.startswith("fashion-mnist/")]
    files = [scratch / "resources" / s.mirror_path for s in specs]
    try:
        for spec, path in zip(specs, files):
            fetch.fetch(spec, path, [mirror] if mirror else [])
        data.save(data.prepare_fashion_mnist(*files), scratch / FASHION_MNIST)
        status = OK
    except Exception as error:  # recorded; the parts that need the data then fail
        status = f"failed: {error}"
    return Outcome("Fashion-MNIST fetched and prepared", None, status, time.monotonic() - start)


def stop(process: subprocess.Popen) -> str:
    """End a part's processes: SIGTERM to its process group (Snakemake passes it on to its
    jobs), then SIGKILL to whatever is left of it; say how long the part took to end."""
    os.killpg(process.pid, signal.SIGTERM)
    start = time.monotonic()
    try:
        process.wait(timeout=GRACE_S)
        ended = f"ended {time.monotonic() - start:.1f} s after SIGTERM"
    except subprocess.TimeoutExpired:
        ended = f"killed, still running {GRACE_S} s after SIGTERM"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return ended


def run_part(part: Part, out: Path, deadline: float, env: dict, total: float = TOTAL_S) -> Outcome:
    """Run ``part`` with its log in ``out``, within its limit and before ``deadline``
    (time.monotonic(), the end of the check's ``total`` seconds), leaving time to stop it."""
    if importlib.util.find_spec(part.needs) is None:
        return Outcome(part.name, part.limit, f"skipped: no {part.needs} in {sys.executable}", 0)
    left = deadline - time.monotonic() - GRACE_S
    limit = left if part.limit is None else min(part.limit, left)
    if limit < 1:
        return Outcome(part.name, part.limit, f"skipped: no time left of {total:.0f} s", 0)
    start = time.monotonic()
    with open(out / part.log, "w") as log:
        log.write(f"$ {part.shown()}\n")
        log.flush()
        process = subprocess.Popen(
            part.command,
            cwd=part.cwd,
            env=env | part.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, which stop() ends whole
        )
        try:
            code = process.wait(timeout=limit)
            status = OK if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            status = f"stopped at its {limit:.0f} s limit; {stop(process)}"
    return Outcome(part.name, limit, status, time.monotonic() - start, part.result(out))


def collect(scratch: Path, out: Path) -> list[tuple[str, float]]:
    """Copy the experiments' CSVs, machine records and job logs, and the claims' verdicts where
    the run reached them, from ``scratch`` to ``out``; write each job's wall time (Snakemake's
    benchmarks) to job-seconds.tsv and return them."""
    results = scratch / paths.RESULTS
    for chapter in ("optimization", "performance", "multidevice"):
        for path in sorted((results / chapter).rglob("*")):
            if path.suffix in (".csv", ".json"):
                copy = out / path.relative_to(scratch)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, copy)
    if (results / "claims.csv").exists():
        shutil.copy2(results / "claims.csv", out / "claims.csv")
    if (scratch / "logs").is_dir():
        shutil.copytree(scratch / "logs", out / "logs")
    jobs = []
    for path in sorted((scratch / "benchmarks").rglob("*.tsv")):
        with open(path) as f:
            row = next(csv.DictReader(f, delimiter="\t"))
        jobs.append(
            (str(path.relative_to(scratch / "benchmarks").with_suffix("")), float(row["s"]))
        )
    with open(out / "job-seconds.tsv", "w") as f:
        f.write("job\tseconds\n" + "".join(f"{job}\t{s:.2f}\n" for job, s in jobs))
    return jobs


# What the compile jobs log of where a compile's time went (d2lrepro.performance.compile_phases).
COMPILE_LOGS = ("hybridize_first_compile.log", "hybridize.log")
COMPILE_LINE = re.compile(
    r"(the first torch\.compile of this machine: .*|\S+ on \S+: torch\.compile's phases: .*)$"
)


def compile_phases(out: Path) -> list[str]:
    """Where the compiles of the jobs whose logs ``out`` holds went, as the logs say: the light
    compile job's record, then hybridize's phases, batch by batch."""
    found = []
    for name in COMPILE_LOGS:
        path = out / "logs" / name
        if path.exists():
            lines = path.read_text(errors="replace").splitlines()
            found += [m[1] for m in map(COMPILE_LINE.search, lines) if m]
    return found


def duration(seconds: float) -> str:
    """As docs/timings.md writes times: "83 s", "7 min 56 s"."""
    whole = round(seconds)
    return f"{whole} s" if whole < 120 else f"{whole // 60} min {whole % 60:02d} s"


def machine_cell(machine: dict) -> str:
    """The machine as a row of docs/timings.md names it, with its torch."""
    gpus = machine["gpus"]
    gpu = f"{len(gpus)} × {gpus[0]}" if gpus else "no GPU"
    cpu = f"{machine['usable_cores']}-core {machine['cpu_model']}"
    return f"{gpu}, {cpu}, torch {machine['torch_version']}"


def said(outcome: Outcome) -> str:
    """What a part's row says: its result where it ended well, else its status first."""
    if outcome.status == OK and outcome.result:
        return outcome.result
    return "; ".join(filter(None, [outcome.status, outcome.result]))


def summary(
    machine: dict,
    commit: str,
    date: str,
    outcomes: list[Outcome],
    jobs: list[tuple[str, float]],
    total: float,
    budget: float = TOTAL_S,
    phases: list[str] = (),
) -> str:
    """summary.md: the machine, each part's row for docs/timings.md (its wall time and what
    it found, or why it did not end well), the experiments' jobs and where their compiles went
    (``phases``: :func:`compile_phases`)."""
    cell = machine_cell(machine)
    memory = ", ".join(f"{mib / 1024:.0f} GiB" for mib in machine["gpu_memory_mib"])
    limits = ", ".join(f"{o.name} {o.limit:.0f} s" for o in outcomes if o.limit is not None)
    row = f"| {date} | {cell} | `{commit}` |"
    lines = [
        f"# GPU check, {date}, {machine['host']}",
        "",
        f"- machine: {cell}; GPU memory {memory}; CUDA {machine['cuda_version']},"
        f" Python {machine['python_version']}",
        f"- commit: `{commit}`",
        f"- the whole check: {duration(total)} (at most {budget:.0f} s); limits: {limits}",
        "",
        "## Rows for docs/timings.md",
        "",
        "| date | machine | commit | what | time | result |",
        "|---|---|---|---|---|---|",
        *(f"{row} {o.name} | {duration(o.seconds)} | {said(o)} |" for o in outcomes),
        f"{row} `tests/gpu_check.py`, the whole check | {duration(total)} |"
        f" {sum(o.status == OK for o in outcomes)} of {len(outcomes)} parts ok |",
        "",
        "## The experiments' jobs (wall time, from Snakemake's benchmarks)",
        "",
        "| job | seconds |",
        "|---|---|",
        *(f"| {job} | {seconds:.2f} |" for job, seconds in jobs),
        f"| {len(jobs)} jobs | {sum(s for _, s in jobs):.2f} |",
    ]
    if phases:
        lines += ["", "## Where the compiles went (the jobs' logs)", ""]
        lines += [f"- {phase}" for phase in phases]
    return "\n".join(lines) + "\n"


def print_plan(parts: list[Part], mirror: Path | None, gpus: int, whole: bool, budget: int) -> None:
    print(f"The GPU check runs, in at most {budget} s, as planned for {gpus} GPU(s):")
    source = mirror or "its URLs"
    if not whole:
        print(f"- Fashion-MNIST from {source}, prepared in SCRATCH/{FASHION_MNIST}")
    for part in parts:
        limit = f"{part.limit:.0f} s" if part.limit else "what is left"
        print(f"- {part.name} (limit: {limit}), in {part.cwd}:\n    {part.shown()}")
    print("SCRATCH: a temporary copy of the repository; OUT: the output folder")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_mirror = os.environ.get("D2L_DATA_MIRROR", REPO.parent / "shared" / "data")
    parser.add_argument("--mirror", type=Path, default=default_mirror)
    parser.add_argument("--out-dir", type=Path, default=Path.cwd(), help="where its folder goes")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    parser.add_argument(
        "--whole-preset",
        action="store_true",
        help="time the whole cpu preset, then run the CUDA tests (no GPU experiments apart, no"
        " ResNet-18)",
    )
    args = parser.parse_args(argv)
    start = time.monotonic()
    mirror = args.mirror.resolve() if args.mirror.is_dir() else None
    gpus = settings.local_gpus()
    whole = args.whole_preset
    budget = WHOLE_TOTAL_S if whole else TOTAL_S
    if args.dry_run:
        planned = plan(Path("SCRATCH"), Path("OUT"), mirror, max(gpus, 1), whole)
        print_plan(planned, mirror, max(gpus, 1), whole, budget)
        return 0
    if not gpus:
        sys.stderr.write("gpu_check: no CUDA device here, and the check needs one (--dry-run")
        sys.stderr.write(" prints what it would run)\n")
        return 2
    machine = environment.describe(cuda_in_a_child=True)
    date = datetime.now().astimezone().strftime("%Y-%m-%d")
    out = args.out_dir.resolve() / f"gpu-check-{machine['host']}-{date}-{uuid.uuid4().hex[:6]}"
    out.mkdir(parents=True)
    (out / "machine.json").write_text(json.dumps(machine, indent=2) + "\n")
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    env |= {"D2L_DATA_MIRROR": str(mirror)} if mirror else {}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        scratch = Path(tmp) / "repo"
        shutil.copytree(REPO, scratch, ignore=lambda d, names: [n for n in names if n in SKIP])
        outcomes = [] if whole else [prepare_data(scratch, mirror)]  # the preset fetches its own
        for part in plan(scratch, out, mirror, gpus, whole):
            outcomes.append(run_part(part, out, start + budget, env, budget))
            print(f"{part.name}: {outcomes[-1].status}, {duration(outcomes[-1].seconds)}")
        jobs = collect(scratch, out)
    if (out / "claims.csv").exists():  # the whole preset's row says what its claims found
        said_before = outcomes[0].result
        outcomes[0].result = "; ".join(filter(None, [said_before, verdicts(out / "claims.csv")]))
    commit = environment.git_commit(REPO)
    took = time.monotonic() - start
    text = summary(machine, commit, date, outcomes, jobs, took, budget, compile_phases(out))
    (out / "summary.md").write_text(text)
    print(f"{text}\nwritten: {out}")
    return 0 if all(o.status == OK for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
