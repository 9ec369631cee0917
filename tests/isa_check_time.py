"""Benchmark: what torch.compile's check of the CPU's vector instructions costs a fresh process,
as this torch makes it and with d2lrepro.performance.isa_probe; a torch of 2.13 or newer, whose
check is quick, is also made to check as torch 2.11 does (each child imports torch, no loader
path set), with and without isa_probe.

    PYTHONPATH=workflow .venv/bin/python tests/isa_check_time.py [--repeats N]

Each way runs in a fresh process, twice by default; torch's libraries for the check are built
first (the first way's first run may include building them). Prints, per run, the children
the check started, their seconds, the whole check's seconds and the instruction sets found.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

# each way: (made to check as torch before 2.13 does, then isa_probe.quicken)
WAYS = {
    "as this torch checks": (False, False),
    "with isa_probe.quicken": (False, True),
    "as torch 2.11 checks": (True, False),
    "as torch 2.11, quickened": (True, True),
}


def check(way: str) -> dict:
    """In this process: torch's check, made ``way``, timed with its children."""
    from torch._inductor import cpu_vec_isa
    from torch._inductor.utils import python_subprocess_env

    from d2lrepro.performance import isa_probe

    as_before, quickened = WAYS[way]
    if as_before:
        cpu_vec_isa.VecISA._avx_py_load = isa_probe.SLOW_PROBE
        cpu_vec_isa.VecISA._build_probe_env = staticmethod(python_subprocess_env)
    if quickened:
        isa_probe.quicken()
    children = []
    for name in ("run", "check_call"):  # torch 2.13 starts its children with one, 2.11 the other
        real = getattr(subprocess, name)

        def timed(*args, real=real, **kwargs):
            start = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                children.append(time.perf_counter() - start)

        setattr(subprocess, name, timed)
    start = time.perf_counter()
    found = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]
    return {
        "check_s": round(time.perf_counter() - start, 2),
        "children": len(children),
        "children_s": round(sum(children), 2),
        "found": found,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--way", help=argparse.SUPPRESS)  # a child's one way
    args = parser.parse_args()
    if args.way:
        print(json.dumps(check(args.way)))
        return
    import torch
    from torch._inductor import cpu_vec_isa

    if hasattr(cpu_vec_isa.VecISA, "_build_probe_env"):  # torch 2.13 or newer: quick already
        ways = ["as this torch checks", "as torch 2.11 checks", "as torch 2.11, quickened"]
    else:
        ways = ["as this torch checks", "with isa_probe.quicken"]
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    for _ in range(args.repeats):
        for way in ways:
            out = subprocess.run(
                [sys.executable, __file__, "--way", way], capture_output=True, text=True, check=True
            ).stdout
            r = json.loads(out.splitlines()[-1])
            print(
                f"{way:<25} {r['children']:>2} children {r['children_s']:>6.2f} s,"
                f" the check {r['check_s']:>6.2f} s: {', '.join(r['found']) or 'none'}"
            )


if __name__ == "__main__":
    main()
