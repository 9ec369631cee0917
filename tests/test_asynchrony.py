import math

from d2lrepro import asynchrony

FAST = {"min_run_time": 0.01, "max_run_time": 0.2}


def by_name(rows):
    return {row["metric"]: row for row in rows}


def values(rows):
    return {row["metric"]: row["value"] for row in rows}


def test_asynchrony_on_cpu(cuda_count):
    cuda_count(0)
    rows = by_name(asynchrony.asynchrony(size=64, steps=2, repeats=1))
    names = ["async.numpy_s"] + [f"async.cpu.{k}" for k in asynchrony.ASYNC_UNITS]
    names += ["async.z0", "async.z1"] + [f"async.cuda.{k}" for k in asynchrony.ASYNC_UNITS]
    assert list(rows) == names
    assert rows["async.z0"]["device"] == "cpu"
    assert rows["async.z0"]["value"] == rows["async.z1"]["value"] == 3.0
    assert (
        rows["async.cpu.nosync_s"]["value"] > 0 and rows["async.cpu.nosync_over_sync"]["value"] > 0
    )
    assert math.isnan(rows["async.cuda.sync_s"]["value"]) and rows["async.cuda.sync_s"][
        "note"
    ].startswith("needs CUDA")


def test_queue_memory_needs_cuda(cuda_count):
    cuda_count(0)
    rows = asynchrony.queue_memory()
    assert [r["metric"] for r in rows] == [
        "async.memory.nosync_peak_bytes",
        "async.memory.sync_peak_bytes",
    ]
    assert all(math.isnan(r["value"]) and r["note"].startswith("needs CUDA") for r in rows)
