"""Benchmark: what torch.compile's check of the CPU's vector instructions costs a fresh process,
as this torch makes it and with d2lrepro.performance.isa_probe; a torch of 2.13 or newer, whose
check is quick, is also made to check as torch 2.11 does (each child imports torch, no loader
path set), with and without isa_probe.

    .venv/bin/python tests/isa_check_time.py [--repeats N]

Each way runs in a fresh process, twice by default, after one untimed check that builds the
check's libraries where torch's cache folder lacks them. Prints, per run, the child Pythons
that loaded a library (not the compiler's runs), their seconds, the whole check's seconds and
the instruction sets found. Asserts nothing.
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
    loads = []  # the seconds of each child Python that loads a library (not the compiler's)
    for name in ("run", "check_call"):  # torch 2.13 starts its children with one, 2.11 the other
        real = getattr(subprocess, name)

        def timed(command, *args, real=real, **kwargs):
            start = time.perf_counter()
            try:
                return real(command, *args, **kwargs)
            finally:
                if isinstance(command, list) and command[0] == sys.executable:
                    loads.append(time.perf_counter() - start)

        setattr(subprocess, name, timed)
    start = time.perf_counter()
    found = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]
    return {
        "check_s": round(time.perf_counter() - start, 2),
        "loads": len(loads),
        "loads_s": round(sum(loads), 2),
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
    checked(ways[0])  # builds the libraries, where torch's cache folder lacks them
    for _ in range(args.repeats):
        for way in ways:
            r = checked(way)
            print(
                f"{way:<25} {r['loads']:>2} loads in children {r['loads_s']:>6.2f} s"
                f" ({r['loads_s'] / max(r['loads'], 1):.2f} s each), the check {r['check_s']:>6.2f}"
                f" s: {', '.join(r['found']) or 'none'}"
            )


def checked(way: str) -> dict:
    """:func:`check` made ``way`` in a fresh process."""
    run = [sys.executable, __file__, "--way", way]
    out = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


if __name__ == "__main__":
    main()
