"""The quick check of the CPU's vector instructions on a torch before 2.13
(d2lrepro.performance.isa_probe): only that torch's script is changed, and its child loads a
library linked to libtorch_cpu without importing torch, or imports torch where it must."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch._inductor.cpu_vec_isa import VecISA

from d2lrepro.performance import hybridize, isa_probe
from isa_check_time import checked

LIBTORCH_CPU = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"


@pytest.fixture
def slow_torch(monkeypatch):
    """This torch with the child's script of torch before 2.13."""
    monkeypatch.setattr(VecISA, "_avx_py_load", isa_probe.SLOW_PROBE)


def test_the_torch_the_project_pins_is_left_alone(monkeypatch):
    script = VecISA._avx_py_load
    if script == isa_probe.SLOW_PROBE:
        pytest.skip(f"torch {torch.__version__} checks as torch before 2.13 does")
    monkeypatch.setattr(VecISA, "_avx_py_load", script)  # put back, should quicken change it
    assert not isa_probe.quicken()
    assert VecISA._avx_py_load == script


def test_only_the_script_of_a_torch_before_2_13_is_changed_and_once(slow_torch, monkeypatch):
    assert isa_probe.quicken()
    assert str(LIBTORCH_CPU) in VecISA._avx_py_load
    assert VecISA._avx_py_load.count("__lib_path__") == 2  # the path torch puts in, both times
    assert not isa_probe.quicken()
    newer = 'import sys\nif sys.platform != "linux":\n    import torch\ncdll.LoadLibrary("x")\n'
    monkeypatch.setattr(VecISA, "_avx_py_load", newer)
    assert not isa_probe.quicken()
    assert VecISA._avx_py_load == newer


def test_another_system_keeps_the_slow_check(slow_torch, monkeypatch):
    monkeypatch.setattr(isa_probe.sys, "platform", "darwin")
    assert not isa_probe.quicken()
    assert VecISA._avx_py_load == isa_probe.SLOW_PROBE


def _child(script: str, library: Path, *flags: str) -> int:
    """The exit status of a child Python that runs ``script`` as torch would, for ``library``;
    without a loader path to torch's libraries, as torch before 2.13 starts it."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    code = script.replace("__lib_path__", str(library))
    return subprocess.run([sys.executable, *flags, "-c", code], env=env, check=False).returncode


def _torch_libraries_needed(library: Path) -> list[str]:
    """The libraries of torch's that ``library`` names as needed, as readelf reads them."""
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True)
    return re.findall(r"\(NEEDED\).*\[(libtorch\w*\.so)\]", dynamic.stdout)


@pytest.mark.skipif(
    not (shutil.which("g++") and shutil.which("readelf")), reason="needs g++ and readelf"
)
def test_the_quick_child_loads_a_library_of_torch_without_importing_it(tmp_path):
    from torch._inductor.cpp_builder import CppBuilder, CppTorchOptions

    # built and linked as torch builds its probes, with one of libtorch_cpu's vector functions
    source = tmp_path / "probe.cpp"
    source.write_text(
        'extern "C" void Sleef_expf8_u10();\n'
        'extern "C" void* probe() { return (void*)&Sleef_expf8_u10; }\n'
    )
    builder = CppBuilder("probe", [str(source)], CppTorchOptions(warning_all=False), tmp_path)
    builder.build()
    library = Path(builder.get_target_file_path())
    quick = isa_probe.QUICK_PROBE.format(libtorch_cpu=str(LIBTORCH_CPU))
    # where libtorch_cpu is not where it was, the child imports torch, as before
    assert _child(isa_probe.QUICK_PROBE.format(libtorch_cpu="/nowhere/lib.so"), library) == 0
    broken = tmp_path / "broken.so"
    broken.write_text("not a library")
    assert _child(quick, broken) != 0
    needed = _torch_libraries_needed(library)
    if needed != ["libtorch_cpu.so"]:
        pytest.skip(f"this linker keeps {needed}: the quick child imports torch here")
    if _child('from ctypes import CDLL\nCDLL("__lib_path__")\n', library) == 0:
        pytest.skip("the loader finds a libtorch_cpu of its own here")
    # -S: no site-packages, so a child that imported torch would fail
    assert _child(isa_probe.SLOW_PROBE, library, "-S") != 0
    assert _child(quick, library, "-S") == 0


def test_torch_2_11_s_check_quickened_finds_what_this_torch_s_own_check_finds():
    """In fresh processes (tests/isa_check_time.py): this torch's check, and the same made to
    check as torch 2.11 does and then quickened."""
    own = checked("as this torch checks")
    if not own["found"]:
        pytest.skip("torch finds no vector instructions to check here")
    assert checked("as torch 2.11, quickened")["found"] == own["found"]


def test_the_first_compiled_call_s_child_pythons_are_the_check_s():
    """Every Python that the MLP's first compiled call starts (with subprocess.run or
    check_call) is started by this torch's check of the CPU's vector instructions
    (cpu_vec_isa): under torch 2.11, the children that isa_probe quickens."""
    missing = hybridize.missing_toolchain("compile", torch.device("cpu"))
    if missing:
        pytest.skip(missing)
    first = checked("as this torch checks", first_call=True)
    if not first["found"]:
        pytest.skip("torch finds no vector instructions to check here")
    assert first["callers"]
    assert all(caller.startswith("cpu_vec_isa.") for caller in first["callers"])
