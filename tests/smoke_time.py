"""Benchmark: the whole workflow on the smoke preset from an empty results tree, as the tests
run it, with the wall time and the jobs that took longest.

    .venv/bin/python tests/smoke_time.py [--mirror ../shared/data]

Prints figures; it asserts nothing (the target is at most 90 s on 2 cores).
"""

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP = {".git", ".venv", ".snakemake", "results", "resources", "logs", "benchmarks", "__pycache__"}
TARGET_S = 90


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_mirror = os.environ.get("D2L_DATA_MIRROR", REPO.parent / "shared" / "data")
    parser.add_argument("--mirror", type=Path, default=default_mirror)
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("snakemake_args", nargs="*", help="more arguments for snakemake")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp) / "repo"
        shutil.copytree(REPO, workdir, ignore=lambda d, names: [n for n in names if n in SKIP])
        command = [
            sys.executable,
            "-m",
            "snakemake",
            "--cores",
            str(args.cores),
            "--config",
            "preset=smoke",
            f"data_mirror={args.mirror.resolve()}",
            *args.snakemake_args,
        ]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"the smoke run failed:\n{done.stderr[-5000:]}")
        wall = time.perf_counter() - start
        jobs = []
        for path in (workdir / "benchmarks").rglob("*.tsv"):
            with open(path) as f:
                row = next(csv.DictReader(f, delimiter="\t"))
            jobs.append((float(row["s"]), str(path.relative_to(workdir / "benchmarks"))))
    jobs.sort(reverse=True)
    print(f"smoke preset end to end on {args.cores} cores: {wall:.1f} s (target <= {TARGET_S} s)")
    print(f"{len(jobs)} benchmarked jobs, {sum(s for s, _ in jobs):.1f} s in all; the slowest:")
    for seconds, name in jobs[:10]:
        print(f"  {seconds:6.2f} s  {name}")


if __name__ == "__main__":
    main()
