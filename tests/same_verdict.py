"""Benchmark: the timing rules of one preset run twice from this commit on this machine, and
the verdicts of the timed claims they measure set side by side ("same machine, same
verdict").

    .venv/bin/python tests/same_verdict.py [--preset cpu] [--rules autopar airfoil ...]
        [--first KEY=VALUE ...] [--second job_server=False ...]

By default the performance chapter's rules (about a minute a run on 2 cores); ``airfoil``
(the optimizers' sec/epoch) and ``data_parallel`` (the 1- and 2-device speed-ups: minutes
a run) may be named. Prints each timed claim's two verdicts and what each run measured, and
the claims whose verdict flipped, and which of them flipped between reproduced and not
reproduced (a flip to or from "inconclusive here" stays within the noise); it asserts
nothing. ``--first`` and ``--second`` give a run config values of its own (``--second
job_server=False``: each job in a fresh Python, against jobs forked from the job server). Run it on
a quiet machine: a job that shares the cores with something else measures that load too.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from d2lrepro.core import provenance
from d2lrepro.pipeline import claims

REPO = Path(__file__).resolve().parents[1]
SKIP = {".git", ".venv", ".snakemake", "results", "resources", "logs", "benchmarks", "__pycache__"}
# Each rule whose results hold timed claims, and its experiment's results folder.
EXPERIMENTS = {
    "hybridize": "performance/hybridize",
    "asynchrony": "performance/asynchrony",
    "autopar": "performance/autopar",
    "hardware": "performance/hardware",
    "airfoil": "optimization/airfoil",
    "data_parallel": "multidevice/data_parallel",
}
TIMING_RULES = ("hybridize", "asynchrony", "autopar", "hardware")


def run_once(
    workdir: Path, preset: str, rules: list[str], cores: int, config: list[str]
) -> dict[str, dict]:
    """Run ``rules`` in a fresh copy of the repository, with ``config`` values besides the
    preset's; each timed claim's row of claims.csv, judged on what they measured (deviations of
    the preset as in the pipeline)."""
    shutil.copytree(REPO, workdir, ignore=lambda d, names: [n for n in names if n in SKIP])
    evidence = [f"results/{EXPERIMENTS[rule]}/metrics.csv" for rule in rules]
    command = [sys.executable, "-m", "snakemake", *evidence, "--cores", str(cores)]
    # the data mirror as the checkout names it (relative to the checkout, not to the copy)
    mirror = REPO / yaml.safe_load((REPO / "config.yaml").read_text())["data_mirror"]
    command += ["--config", f"preset={preset}", f"data_mirror={mirror.resolve()}", *config]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"the run failed:\n{done.stderr[-5000:]}")
    print(f"  {', '.join(rules)}: {time.perf_counter() - start:.0f} s")
    rows = {}
    for section in claims.load(workdir / "workflow" / "claims.yaml")["sections"]:
        for claim in section["claims"]:
            if claim["evidence"] in evidence and claim.get("timed"):
                path = workdir / claim["evidence"]
                records = provenance.read(provenance.sidecar(path))
                rows[claim["id"]] = claims.evaluate_claim(claim, pd.read_csv(path), records)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--rules", nargs="+", default=list(TIMING_RULES), choices=EXPERIMENTS)
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--first", nargs="+", default=[], help="the first run's KEY=VALUE")
    parser.add_argument("--second", nargs="+", default=[], help="the second run's KEY=VALUE")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for n, config in ((1, args.first), (2, args.second)):
            print(f"run {n}: {' '.join(config)}")
            runs.append(
                run_once(Path(tmp) / f"run{n}", args.preset, args.rules, args.cores, config)
            )
    first, second = runs
    flipped = [i for i in first if first[i]["verdict"] != second[i]["verdict"]]
    for claim_id in first:
        print(f"{claim_id}: {first[claim_id]['verdict']} | {second[claim_id]['verdict']}")
        for row in (first[claim_id], second[claim_id]):
            print(f"    {row['measured']}")
    print(f"{len(flipped)} of {len(first)} timed claims flipped: {', '.join(flipped) or 'none'}")
    both = {claims.REPRODUCED, claims.NOT_REPRODUCED}
    crossed = [i for i in flipped if {first[i]["verdict"], second[i]["verdict"]} == both]
    print(f"between reproduced and not reproduced: {', '.join(crossed) or 'none'}")


if __name__ == "__main__":
    main()
