"""torch.compile's check of the CPU's vector instructions, made quick on a torch that makes it
slow; it serves the compile mode of hybridize (``hyb.bench.compile``, ``hyb.bench.compile.gpu``)
and its light job, and changes no answer.

Before a process compiles its first kernel for the CPU, torch learns which vector instruction
sets (AVX2, AVX-512 and its extensions, AMX) the CPU and the compiler both support: for each it
builds a small library, keeps it in its cache folder, and loads it in a child Python. Before
torch 2.13 that child imports torch first, only so that the library's link to libtorch_cpu
resolves. With torch 2.11 on the H200 box, a profile of hybridize's first compiled call
(52.5 s) counted 48 s in ten children of about 4.8 s each; the same torch on a 2-core machine
starts no child Python in that call but the check's (six there). Every process that compiles
starts them again. Torch 2.13 loads the library without importing torch, with torch's library
folder on the loader's path. :func:`quicken` has an older torch's child load libtorch_cpu by
its path and then the library, and import torch only where that fails, so each answer is the
one the slow child would have given. It is quick where the library needs no other library of
torch's: torch links it to libtorch, libtorch_cpu and libtorch_python, and a linker that drops
the libraries it does not use (gcc's default on Debian and Ubuntu) keeps only libtorch_cpu;
elsewhere the child imports torch, as before.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import torch

log = logging.getLogger(__name__)

# The child's script before torch 2.13 (torch._inductor.cpu_vec_isa.VecISA._avx_py_load), to the
# letter; torch puts the library's path in place of __lib_path__.
SLOW_PROBE = '\nimport torch\nfrom ctypes import cdll\ncdll.LoadLibrary("__lib_path__")\n'
# libtorch_cpu comes first, by its path, even for a library that needs none of torch's: loaded
# alone, the library could find another install's libtorch_cpu on the loader's path.
QUICK_PROBE = """
from ctypes import CDLL
try:
    CDLL({libtorch_cpu!r})
    CDLL("__lib_path__")
except OSError:
    import torch
    CDLL("__lib_path__")
"""


def quicken() -> bool:
    """Where this torch's child imports torch to load each vector-instruction library (its
    script is :data:`SLOW_PROBE`, on Linux), have it load libtorch_cpu by its path first.
    True where this call changed the check; a torch whose script differs is left alone."""
    if sys.platform != "linux":
        return False
    # torch.compile's own module: a second to import, so only where a compile is asked for
    from torch._inductor.cpu_vec_isa import VecISA

    if getattr(VecISA, "_avx_py_load", "") != SLOW_PROBE:
        return False
    libtorch_cpu = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    if not libtorch_cpu.is_file():
        return False
    VecISA._avx_py_load = QUICK_PROBE.format(libtorch_cpu=str(libtorch_cpu))
    log.info(
        "torch %s checks the CPU's vector instructions in children that import torch; "
        "they now load %s by its path first, and import torch only where that fails",
        torch.__version__,
        libtorch_cpu.name,
    )
    return True
