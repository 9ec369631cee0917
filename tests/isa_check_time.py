"""Benchmark: what torch.compile's check of the CPU's vector instructions costs a fresh process,
as this torch makes it and with d2lrepro.performance.isa_probe; a torch of 2.13 or newer, whose
check is quick, is also made to check as torch 2.11 does (each child imports torch, no loader
path set), with and without isa_probe.

    .venv/bin/python tests/isa_check_time.py [--repeats N] [--first-call]

Each way runs in a fresh process, twice by default, after one untimed check that builds the
check's libraries where torch's cache folder lacks them. Prints, per run, the child Pythons
that loaded a library (not the compiler's runs), their seconds, the whole check's seconds and
the instruction sets found. With --first-call each run times instead the MLP's first call
compiled by hybridize.convert (torch's FX graph cache off, so that it compiles), and names
the torch functions that started those children. Asserts nothing.

Another torch (the GPU box's 2.11, say) runs it from a virtual environment of its own:
``PYTHONPATH=workflow path/to/venv/bin/python tests/isa_check_time.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# each way: (made to check as torch before 2.13 does, then isa_probe.quicken)
WAYS = {
    "as this torch checks": (False, False),
    "with isa_probe.quicken": (False, True),
    "as torch 2.11 checks": (True, False),
    "as torch 2.11, quickened": (True, True),
}


def check(way: str, first_call: bool = False) -> dict:
    """In this process: torch's check, made ``way``, timed with its children; or, with
    ``first_call``, the MLP's first compiled call, which makes that check."""
    from torch._inductor import cpu_vec_isa
    from torch._inductor.utils import python_subprocess_env

    from d2lrepro.performance import isa_probe

    as_before, quickened = WAYS[way]
    if as_before:
        cpu_vec_isa.VecISA._avx_py_load = isa_probe.SLOW_PROBE
        cpu_vec_isa.VecISA._build_probe_env = staticmethod(python_subprocess_env)
    if quickened:
        isa_probe.quicken()
    if first_call:  # the MLP's imports only where it is compiled, before the clock starts
        import torch
        from torch._inductor import config

        from d2lrepro.core.models import mlp
        from d2lrepro.performance import hybridize

        config.fx_graph_cache = False
        if not quickened:  # hybridize.convert would quicken where this torch checks slowly
            isa_probe.quicken = lambda: False
    loads = []  # each child Python that loads a library (not the compiler's): seconds, caller
    for name in ("run", "check_call"):  # torch 2.13 starts its children with one, 2.11 the other
        real = getattr(subprocess, name)

        def timed(command, *args, real=real, **kwargs):
            start = time.perf_counter()
            try:
                return real(command, *args, **kwargs)
            finally:
                if isinstance(command, list) and command[0] == sys.executable:
                    loads.append((time.perf_counter() - start, _torch_caller()))

        setattr(subprocess, name, timed)
    start = time.perf_counter()
    if first_call:
        hybridize.convert(mlp(), "compile")(torch.randn(1, 512))
    found = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]  # cached after a first call
    return {
        "timed_s": round(time.perf_counter() - start, 2),
        "loads": len(loads),
        "loads_s": round(sum(s for s, _ in loads), 2),
        "callers": sorted({caller for _, caller in loads}),
        "found": found,
    }


def _torch_caller() -> str:
    """The innermost function of torch's inductor on this call's stack, as module.function
    (read from the frames alone: no source file is read)."""
    frame = sys._getframe()
    while frame is not None:
        code = frame.f_code
        if "_inductor" in Path(code.co_filename).parts:
            return f"{Path(code.co_filename).stem}.{code.co_name}"
        frame = frame.f_back
    return "not torch's inductor"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--first-call", action="store_true", help="time the first compiled call")
    parser.add_argument("--way", help=argparse.SUPPRESS)  # a child's one way
    args = parser.parse_args()
    if args.way:
        print(json.dumps(check(args.way, args.first_call)))
        return
    import torch
    from torch._inductor import cpu_vec_isa

    if hasattr(cpu_vec_isa.VecISA, "_build_probe_env"):  # torch 2.13 or newer: quick already
        ways = ["as this torch checks", "as torch 2.11 checks", "as torch 2.11, quickened"]
    else:
        ways = ["as this torch checks", "with isa_probe.quicken"]
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    checked(ways[0], args.first_call)  # builds what torch's cache folder lacks
    timed = "the first compiled call" if args.first_call else "the check"
    for _ in range(args.repeats):
        for way in ways:
            r = checked(way, args.first_call)
            print(
                f"{way:<25} {r['loads']:>2} loads in children {r['loads_s']:>6.2f} s"
                f" ({r['loads_s'] / max(r['loads'], 1):.2f} s each), {timed} {r['timed_s']:>6.2f}"
                f" s: {', '.join(r['found']) or 'none'}"
                + (f"; children started by {', '.join(r['callers'])}" if args.first_call else "")
            )


def checked(way: str, first_call: bool = False) -> dict:
    """:func:`check` made ``way`` in a fresh process."""
    run = [sys.executable, __file__, "--way", way] + ["--first-call"] * first_call
    out = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


if __name__ == "__main__":
    main()
