import math

import pandas as pd
import pytest
import torch

from conftest import verdict_of
from d2lrepro.core.results import metric
from d2lrepro.performance import hardware
from d2lrepro.pipeline.claims import NOT_APPLICABLE, NOT_REPRODUCED, REPRODUCED
from shared_cores import skip_if_shared, timed_alone

MIB = 1024**2


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
    assert len(rows) == 9 and all(
        math.isnan(r["value"]) and r["note"].startswith("needs CUDA") for r in rows
    )


def test_chase_chain_is_one_cycle_through_every_line():
    buffer, start = hardware.chase_chain(64 * 100)
    flat, seen, p = buffer.view(-1).tolist(), set(), start
    while p not in seen:
        seen.add(p)
        p = flat[p]
    assert p == start and seen == {line * 8 for line in range(100)}


def test_latency_grows_from_l1_to_a_working_set_beyond_l2():
    latency = hardware.latency_sweep(64 * 1024**2, min_bytes=16 * 1024, hops=200_000, repeats=3)
    assert list(latency["bytes"])[:2] == [16 * 1024, 32 * 1024]
    assert latency["ns"].iloc[-1] > 3 * latency["ns"].iloc[0] > 0


def test_latency_metrics_pick_levels_by_cache_size():
    latency = pd.DataFrame(
        {"bytes": [16 * 1024, 256 * 1024, 256 * 1024**2], "ns": [1.5, 5.0, 80.0]}
    )
    caches = {"L1d": 32 * 1024, "L2": 1024**2}
    rows = {r["metric"]: r for r in hardware.latency_metrics(latency, caches)}
    assert [rows[f"lat.{k}_ns"]["value"] for k in ("l1", "l2", "mib256")] == [1.5, 5.0, 80.0]
    rows = {r["metric"]: r for r in hardware.latency_metrics(latency.iloc[:2], caches)}
    assert rows["lat.mib256_ns"]["note"] == "the chase stops at 0.25 MiB (hardware.latency_max_mib)"
    rows = hardware.latency_metrics(None, caches)
    assert all(math.isnan(r["value"]) and "C compiler" in r["note"] for r in rows)


def test_figure(tmp_path):
    sweep = pd.DataFrame({"device": "cpu", "bytes": [16384, 32768], "gbps": [1.0, 2.0]})
    latency = pd.DataFrame({"bytes": [16384, 32768], "ns": [1.4, 1.5]})
    for lat in (latency, None):
        path = tmp_path / "mem.png"
        hardware.draw_memory_sweep(sweep, lat, path, "footer", caches={"L1d": 32768})
        assert path.stat().st_size > 0


def test_overheads_time_one_large_and_many_small_copies_and_a_launch(cuda_count):
    cuda_count(0)
    rows = {
        r["metric"]: r for r in hardware.overheads({"transfer_mib": 1, "transfer_chunk_kib": 4})
    }
    cpu = {k: r["value"] for k, r in rows.items() if ".cpu." in k}
    assert len(cpu) == 5 and all(v > 0 for k, v in cpu.items() if not k.endswith("iqr_s"))
    gpu = [r for k, r in rows.items() if ".cuda." in k]
    assert len(gpu) == 5 and all(r["status"] == "not applicable" for r in gpu)


def latencies(l1: float, l2: float, mib256: float) -> list[dict]:
    return [
        metric(f"lat.{name}_ns", ns, "ns")
        for name, ns in (("l1", l1), ("l2", l2), ("mib256", mib256))
    ]


def test_latency_claim_at_the_book_s_strength():
    assert verdict_of("hw.lat", latencies(1.5, 5, 75)) == REPRODUCED  # the book's table
    assert verdict_of("hw.lat", latencies(1.5, 4, 75)) == NOT_REPRODUCED  # L2 only 2.7x L1
    assert verdict_of("hw.lat", latencies(1.5, 5, 46)) == NOT_REPRODUCED  # memory 9.2x L2


def test_a_prefetchable_chain_fails_the_latency_claim(monkeypatch):
    caches = hardware.cache_sizes()
    if not {"L1d", "L2"} <= set(caches):
        pytest.skip("sysfs does not report this CPU's L1d and L2 sizes")

    def measure():
        small = hardware.latency_sweep(caches["L2"] // 2, hops=100_000, repeats=3)
        large = hardware.latency_sweep(256 * MIB, min_bytes=256 * MIB, hops=100_000, repeats=3)
        return hardware.latency_metrics(pd.concat([small, large]), caches)

    # Mutation: the chain visits the lines in order instead of shuffled, so the hardware
    # prefetcher fetches each next line before it is read.
    monkeypatch.setattr(torch, "randperm", lambda n, generator=None: torch.arange(n))
    assert verdict_of("hw.lat", measure()) == NOT_REPRODUCED

    monkeypatch.undo()
    rows, others = timed_alone(measure)
    verdict = verdict_of("hw.lat", rows)
    ns = {row["metric"]: round(row["value"], 2) for row in rows}
    skip_if_shared(verdict, REPRODUCED, others, f"unbroken: {verdict} ({ns})")
    # The unbroken chain must reproduce: otherwise the mutation above showed nothing.
    assert verdict == REPRODUCED, f"the unbroken chain reads {verdict}: {ns}"


def test_one_megabyte_copy_within_the_book_s_80_us(cuda_count):
    gpu = {"cuda_devices": 1, "usable_cores": 2}
    copy = [metric("latency.h2d.pinned.mib1.us", 42.0, "µs", "cuda:0")]
    assert verdict_of("hw.gpu", copy, gpu) == REPRODUCED
    slow = [metric("latency.h2d.pinned.mib1.us", 95.0, "µs", "cuda:0")]
    assert verdict_of("hw.gpu", slow, gpu) == NOT_REPRODUCED
    cuda_count(0)
    assert verdict_of("hw.gpu", hardware.bandwidth(sizes_mib=(1,))) == NOT_APPLICABLE


def test_many_small_copies_that_copy_the_whole_at_once_fail_the_transfer_claim(monkeypatch):
    def measure():
        return hardware.transfer_cost(torch.device("cpu"), total_mib=4, max_run_time=0.3)

    # Mutation: the pieces' size read in MiB instead of KiB, so "many" is one 4 MiB copy.
    monkeypatch.setattr(hardware, "KIB", MIB)
    assert verdict_of("hw.transfers", measure()) == NOT_REPRODUCED

    monkeypatch.undo()
    rows, others = timed_alone(measure)
    verdict = verdict_of("hw.transfers", rows)
    skip_if_shared(verdict, REPRODUCED, others, f"unbroken: {verdict}")
    assert verdict == REPRODUCED


def test_a_kernel_launch_is_judged_within_half_a_decade_of_the_books_10_us():
    gpu = {"cuda_devices": 1, "usable_cores": 2}

    def launch(us):
        return [metric("launch.cuda.us", us, "µs", "cuda:0")]

    for us in (10, 3.5, 30):  # the book's 10 µs, and within a factor √10 of it
        assert verdict_of("hw.launch", launch(us), gpu) == REPRODUCED
    for us in (3.0, 2.0, 35, 50):  # a decade off, as the old bounds 2 to 50 µs allowed
        assert verdict_of("hw.launch", launch(us), gpu) == NOT_REPRODUCED
    assert verdict_of("hw.launch", launch(10)) == NOT_APPLICABLE  # no GPU measured it
