"""The first torch.compile of a machine, made before :mod:`.hybridize` times its compile mode
(``hyb.bench.compile``). That first compilation builds and loads small C++ programs to learn
which vector instructions the CPU has (about 15 s on the 2-core test machine, where compiling
the MLP itself takes 3 s), and torch keeps what it built on disk, in its inductor cache, for
every later process of the user (each still loads them, quickly). A light job (one core, no
GPU) pays it beside other jobs, so that the timing job, which holds every core and the GPU, does
not hold them while torch builds. The compile mode's cold loop
(``hyb.batch{B}.compile.naive_s``) then times compiling the MLP, not probing the machine; no
claim judges that first call. On a cluster, whose nodes do not share that cache, hybridize pays
it itself.
"""

from __future__ import annotations

import time

import torch

from d2lrepro.core.results import one_line
from d2lrepro.performance import compile_phases
from d2lrepro.performance.hybridize import convert, missing_toolchain


def prepare(modes) -> dict:
    """Where hybridize's ``modes`` include compile, compile and run a small function on the
    CPU, with one thread compiling: the record of what that took (``seconds``, and the slowest
    of torch.compile's ``phases``), or of why nothing was compiled (``skipped``)."""
    if "compile" not in modes:
        return {"skipped": "compile is not among hybridize.modes"}
    missing = missing_toolchain("compile", torch.device("cpu"))
    if missing:
        return {"skipped": missing}
    start = time.perf_counter()
    try:
        convert(torch.nn.ReLU(), "compile")(torch.ones(8))  # as hybridize compiles
    except Exception as error:  # noqa: BLE001 -- hybridize meets and records it again
        return {"skipped": f"torch.compile failed: {one_line(error)}"}
    seconds = round(time.perf_counter() - start, 3)
    return {"seconds": seconds, "phases": compile_phases.since({})}
