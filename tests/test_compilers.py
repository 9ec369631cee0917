import json
import math
import subprocess
import sys

import pandas as pd
import pytest

from d2lrepro import compilers
from d2lrepro.results import not_applicable

FAST = {"min_run_time": 0.01, "max_run_time": 0.2}


def by_name(rows):
    return {row["metric"]: row for row in rows}


def values(rows):
    return {row["metric"]: row["value"] for row in rows}


def test_fancy_func_imperative_and_symbolic():
    rows, program = compilers.imperative_vs_symbolic()
    assert values(rows) == {"imperative.result": 10, "symbolic.result": 10}
    assert "def fancy_func(a, b, c, d):" in program and program.endswith(
        "print(fancy_func(1, 2, 3, 4))"
    )


@pytest.fixture(scope="module")
def hybrid_rows():
    return compilers.hybridize(batch_sizes=(1, 4), modes=("eager", "script"), n_calls=5, **FAST)


def test_script_matches_eager(hybrid_rows):
    measured = values(hybrid_rows)
    for batch in (1, 4):
        for mode in ("eager", "script"):
            prefix = f"hyb.batch{batch}.{mode}"
            assert measured[f"{prefix}.max_abs_diff"] <= 1e-5
            assert measured[f"{prefix}.median_s"] > 0 and measured[f"{prefix}.naive_s"] > 0
            assert measured[f"{prefix}.iqr_s"] >= 0 and measured[f"{prefix}.runs"] > 0
        assert measured[f"hyb.batch{batch}.eager_over_script"] > 0
    assert measured["hyb.n_calls"] == 5


def test_a_mode_failing_on_first_call_is_not_applicable(monkeypatch):
    def broken(x):
        raise RuntimeError("no C++ compiler\nmore detail")

    real = compilers.convert
    monkeypatch.setattr(
        compilers, "convert", lambda net, mode: broken if mode == "compile" else real(net, mode)
    )
    rows = by_name(
        compilers.hybridize(batch_sizes=(1,), modes=("eager", "compile"), n_calls=2, **FAST)
    )
    for name in (
        "hyb.batch1.compile.median_s",
        "hyb.batch1.compile.naive_s",
        "hyb.batch1.eager_over_compile",
    ):
        assert (
            math.isnan(rows[name]["value"])
            and rows[name]["note"] == "RuntimeError: no C++ compiler"
        )
    assert rows["hyb.batch1.eager.median_s"]["value"] > 0


COMPILE_PROBE = """
import json
from d2lrepro import compilers
rows = compilers.hybridize(
    batch_sizes=(2,), modes=("eager", "compile"), n_calls=2, min_run_time=0.01, max_run_time=0.1
)
print(json.dumps({r["metric"]: [r["value"], r["note"]] for r in rows}))
"""


def test_compile_matches_eager():
    try:
        done = subprocess.run(
            [sys.executable, "-c", COMPILE_PROBE], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.skip("torch.compile took more than 60 s to compile the MLP on this machine")
    assert done.returncode == 0, done.stderr
    value, note = json.loads(done.stdout.splitlines()[-1])["hyb.batch2.compile.max_abs_diff"]
    if note:
        pytest.skip(f"torch.compile does not work here: {note}")
    assert value <= 1e-5


def test_serialization_round_trip(tmp_path):
    measured = values(compilers.serialize(tmp_path))
    assert (tmp_path / "my_mlp").is_file()
    assert measured["serial.params"] == compilers.BOOK_PARAMS
    assert 600 * 1024 < measured["serial.file_bytes"] < 700 * 1024  # book: 651K
    assert measured["serial.max_abs_diff"] == 0


def test_figure(tmp_path, hybrid_rows):
    failed = [
        not_applicable(f"hyb.batch1.compile.{stat}", "RuntimeError: no compiler", "s")
        for stat in ("median_s", "iqr_s", "naive_s")
    ]
    compilers.plot_hybridization(pd.DataFrame(hybrid_rows + failed), tmp_path / "hyb.png", "footer")
    assert (tmp_path / "hyb.png").stat().st_size > 0


def test_the_cpu_is_always_timed_and_a_gpu_gets_rows_of_its_own(tmp_path, cuda_count):
    cfg = {"batch_sizes": [1], "modes": ["eager"], "n_calls": 2, "max_run_time": 0.05}
    cuda_count(0)
    names = {r["metric"] for r in compilers.measure(cfg, 0, tmp_path)}
    assert "hyb.batch1.eager.median_s" in names and not any(".cuda." in n for n in names)
    rows = compilers.hybridize(
        batch_sizes=(1,), modes=("eager",), n_calls=2, prefix="hyb.cuda", **FAST
    )
    assert "hyb.cuda.batch1.eager.median_s" in {r["metric"] for r in rows}
