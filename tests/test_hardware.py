import math

import pandas as pd

from d2lrepro import hardware


def test_memory_sweep_with_a_tiny_maximum():
    sweep = hardware.memory_sweep(
        max_bytes=128 * 1024, devices=["cpu"], min_run_time=0.005, max_run_time=0.05
    )
    assert list(sweep["bytes"]) == [16 * 1024, 32 * 1024, 64 * 1024, 128 * 1024]
    assert (sweep["gbps"] > 0).all() and set(sweep["device"]) == {"cpu"}


def test_cache_sizes_from_sysfs(tmp_path):
    for index, (level, kind, size) in enumerate(
        [
            (1, "Data", "32K"),
            (1, "Instruction", "32K"),
            (2, "Unified", "512K"),
            (3, "Unified", "32M"),
        ]
    ):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (folder / name).write_text(f"{text}\n")
    assert hardware.cache_sizes(tmp_path) == {
        "L1d": 32 * 1024,
        "L2": 512 * 1024,
        "L3": 32 * 1024**2,
    }
    assert hardware.cache_sizes(tmp_path / "missing") == {}


def test_bandwidth_needs_cuda(cuda_count):
    cuda_count(0)
    rows = hardware.bandwidth(sizes_mib=(1, 4))
    assert len(rows) == 8 and all(
        math.isnan(r["value"]) and r["note"].startswith("needs CUDA") for r in rows
    )


def test_figure(tmp_path):
    sweep = pd.DataFrame({"device": "cpu", "bytes": [16384, 32768], "gbps": [1.0, 2.0]})
    hardware.plot_memory_sweep(sweep, tmp_path / "mem.png", "footer", caches={"L1d": 32768})
    assert (tmp_path / "mem.png").stat().st_size > 0
