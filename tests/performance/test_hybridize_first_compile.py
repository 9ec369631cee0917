"""The machine's first torch.compile, made by a light job before hybridize times the compile
mode (d2lrepro.performance.hybridize_first_compile): it leaves its builds in torch's cache for
later processes, and never fails a run where it cannot compile."""

import json
import os
import subprocess
import sys

import pytest

from d2lrepro.performance import hybridize, hybridize_first_compile


def test_without_the_compile_mode_it_compiles_nothing(monkeypatch):
    def compile_(*args, **kwargs):
        raise AssertionError("compiled")

    monkeypatch.setattr(hybridize_first_compile.torch, "compile", compile_)
    assert hybridize_first_compile.prepare(["eager", "script"]) == {
        "skipped": "compile is not among hybridize.modes"
    }


def test_a_missing_compiler_is_named(monkeypatch):
    monkeypatch.setattr(hybridize.shutil, "which", lambda name: None)
    assert hybridize_first_compile.prepare(["compile"]) == {
        "skipped": "torch.compile needs a C++ compiler (g++), and none is on the PATH"
    }


def test_a_failing_compile_is_recorded_not_raised(monkeypatch):
    def compile_(*args, **kwargs):
        raise RuntimeError("no backend\nmore")

    monkeypatch.setattr(hybridize.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(hybridize_first_compile.torch, "compile", compile_)
    assert hybridize_first_compile.prepare(["compile"]) == {
        "skipped": "torch.compile failed: RuntimeError: no backend"
    }


def test_what_it_builds_stays_in_torchs_cache_for_the_next_process(tmp_path):
    """A fresh cache folder: the first process builds (the programs that learn the CPU's vector
    instructions among them) and torch keeps what it built there; the next builds nothing. It
    builds with one thread, as hybridize does: no pool of compiling threads (on CUDA, of
    compiling processes, which would start beside hybridize's timings)."""
    prepare = "import json\nfrom d2lrepro.performance import hybridize_first_compile as h\n"
    prepare += "from torch._inductor.async_compile import AsyncCompile\n"
    prepare += "print(json.dumps(h.prepare(['compile'])))\n"
    prepare += "print(AsyncCompile.pool.cache_info().currsize)"
    env = os.environ | {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    built = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", prepare], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        record, pools = map(json.loads, done.stdout.splitlines()[-2:])
        if "skipped" in record:
            pytest.skip(f"torch.compile does not work here: {record['skipped']}")
        assert record["seconds"] > 0 and isinstance(record["phases"], str) and pools == 0
        built.append(sorted(tmp_path.rglob("*.so")))
    assert built[0], "nothing built was kept"
    assert built[1] == built[0], "the second process built again"
