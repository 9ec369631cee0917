import math

import pandas as pd
import torch

from conftest import judged, skip_if_shared, timed_alone, verdict_of
from d2lrepro.core import plotting
from d2lrepro.core.results import metric
from d2lrepro.performance import hardware
from d2lrepro.pipeline.claims import (
    INCONCLUSIVE,
    NO_SPREAD,
    NOT_APPLICABLE,
    NOT_REPRODUCED,
    OBSERVED,
    REPRODUCED,
)

MIB = 1024**2


def test_memory_sweep_with_a_tiny_maximum():
    sweep = hardware.memory_sweep(
        max_bytes=128 * 1024, on_devices=["cpu"], min_run_time=0.005, max_run_time=0.05
    )
    assert list(sweep["bytes"]) == [16 * 1024, 32 * 1024, 64 * 1024, 128 * 1024]
    assert (sweep["gbps"] > 0).all() and set(sweep["device"]) == {"cpu"}


def test_bandwidth_needs_cuda(cuda_count):
    cuda_count(0)
    rows = hardware.bandwidth(sizes_mib=(1, 4))
    # 2 directions × 2 kinds of host memory × 2 sizes, and the 1 MiB copy's latency and IQR.
    assert len(rows) == 10 and all(
        math.isnan(r["value"]) and r["note"].startswith("needs CUDA") for r in rows
    )


def test_figure(tmp_path):
    sweep = pd.DataFrame({"device": "cpu", "bytes": [16384, 32768], "gbps": [1.0, 2.0]})
    latency = pd.DataFrame({"bytes": [16384, 32768], "ns": [1.4, 1.5]})
    for lat in (latency, None):
        path = tmp_path / "mem.png"
        hardware.draw_memory_sweep(sweep, lat, path, "footer", caches={"L1d": 32768})
        assert path.stat().st_size > 0


def test_throughput_is_on_a_log_axis_and_the_book_s_latencies_in_grey(monkeypatch):
    """A CPU's tens of GB/s and a GPU's thousands both show on a log axis."""
    drawn = []
    monkeypatch.setattr(plotting, "save", lambda fig, path, footer=None: drawn.append(fig))
    sweep = pd.DataFrame(
        {
            "device": ["cpu", "cpu", "cuda:0", "cuda:0"],
            "bytes": [2**14, 2**15] * 2,
            "gbps": [50.0, 100.0, 40.0, 4000.0],
        }
    )
    latency = pd.DataFrame({"bytes": [16384, 32768], "ns": [1.4, 1.5]})
    hardware.draw_memory_sweep(sweep, latency, "mem.png", "footer", caches={"L1d": 32768})
    (fig,) = drawn
    left, right, book = fig.axes
    assert left.get_yscale() == "log" and right.get_yscale() == "log"
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["cpu", "cuda:0"]
    assert left.get_legend().get_texts()[0].get_fontsize() >= plotting.readable_pt(fig)
    names = [t.get_text() for t in book.get_yticklabels()]
    assert names == [f"book {name}" for name in hardware.BOOK_LATENCY_NS]
    levels = [line for line in right.lines if line.get_linestyle() == "--"]
    assert {line.get_color() for line in levels} == {plotting.BOOK_GREY}
    assert right.lines[0].get_color() != plotting.BOOK_GREY  # ours
    plotting.pyplot().close(fig)


def test_overheads_time_one_large_and_many_small_copies_and_a_launch(cuda_count):
    cuda_count(0)
    rows = {
        r["metric"]: r for r in hardware.overheads({"transfer_mib": 1, "transfer_chunk_kib": 4})
    }
    cpu = {k: r["value"] for k, r in rows.items() if ".cpu." in k}
    # The median and the IQR of one copy, of many, and of a launch (in µs).
    assert len(cpu) == 6 and {k for k in cpu if k.startswith("launch.")} == {
        "launch.cpu.us",
        "launch.cpu.iqr_us",
    }
    spreads = {k for k in cpu if k.rpartition(".")[2].startswith("iqr")}
    assert len(spreads) == 3 and all(cpu[k] >= 0 for k in spreads)
    assert all(v > 0 for k, v in cpu.items() if k not in spreads)
    gpu = [r for k, r in rows.items() if ".cuda." in k]
    assert len(gpu) == 6 and all(r["status"] == "not applicable" for r in gpu)


def test_a_one_megabyte_copy_is_judged_within_half_a_decade_of_the_books_80_us(cuda_count):
    gpu = {"cuda_devices": 1, "usable_cores": 2}

    def copy(us, spread=0.01):  # the IQR over the copies: 1% of their median
        return [
            metric("latency.h2d.pinned.mib1.us", us, "µs", "cuda:0"),
            metric("latency.h2d.pinned.mib1.iqr_us", us * spread, "µs", "cuda:0"),
        ]

    # The book's PCIe 3.0 link (80 µs, or slower: the old one-sided bound failed 95 µs), the
    # H200's 29 µs, and within a factor √10 of 80 µs either side.
    for us in (80, 95, 29, 26, 250):
        assert verdict_of("hw.gpu", copy(us), gpu) == REPRODUCED
    for us in (25, 10, 260, 800):  # a link more than √10 times faster or slower
        assert verdict_of("hw.gpu", copy(us), gpu) == NOT_REPRODUCED
    # One copy timed, or copies timed alike: no measured spread, so the book's 80 µs judges
    # nothing.
    once = judged("hw.gpu", copy(80, spread=0), gpu)
    assert once["verdict"] == INCONCLUSIVE and once["reason"].startswith(NO_SPREAD)
    cuda_count(0)
    assert verdict_of("hw.gpu", hardware.bandwidth(sizes_mib=(1,))) == NOT_APPLICABLE


def test_many_small_copies_that_copy_the_whole_at_once_fail_the_transfer_claim(monkeypatch):
    def measure():
        return hardware.transfer_cost(torch.device("cpu"), total_mib=4, max_run_time=0.3)

    # Mutation: the pieces' size read in MiB instead of KiB, so "many" is one 4 MiB copy.
    monkeypatch.setattr(hardware, "KIB", MIB)
    assert verdict_of("hw.transfers", measure()) in (NOT_REPRODUCED, INCONCLUSIVE)

    monkeypatch.undo()
    rows, others = timed_alone(measure)
    verdict = verdict_of("hw.transfers", rows)
    skip_if_shared(verdict, REPRODUCED, others, f"unbroken: {verdict}")
    assert verdict == REPRODUCED


def test_a_kernel_launch_is_judged_within_half_a_decade_of_the_books_10_us():
    gpu = {"cuda_devices": 1, "usable_cores": 2}

    def launch(us, spread=0.01):  # the IQR over the queues of launches: 1% of their median
        return [
            metric("launch.cuda.us", us, "µs", "cuda:0"),
            metric("launch.cuda.iqr_us", us * spread, "µs", "cuda:0"),
        ]

    for us in (10, 3.5, 30):  # the book's 10 µs, and within a factor √10 of it
        assert verdict_of("hw.launch", launch(us), gpu) == REPRODUCED
    for us in (3.0, 2.0, 35, 50):  # a decade off, as the old bounds 2 to 50 µs allowed
        assert verdict_of("hw.launch", launch(us), gpu) == NOT_REPRODUCED
    once = judged("hw.launch", launch(10, spread=0), gpu)  # no measured spread
    assert once["verdict"] == INCONCLUSIVE and once["reason"].startswith(NO_SPREAD)
    # Launches timed where the job had no GPU: an observation of this machine.
    assert verdict_of("hw.launch", launch(10)) == OBSERVED
