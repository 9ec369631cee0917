"""The book's cold loop timed in fresh processes (d2lrepro.performance.hybridize_cold)."""

import os
import subprocess
import sys
import time

import pytest

from conftest import verdict_of
from d2lrepro.performance import hybridize_cold
from d2lrepro.pipeline.claims import NOT_REPRODUCED, REPRODUCED


@pytest.mark.parametrize(
    "machine, verdict",
    [
        ("rewards the second loop", NOT_REPRODUCED),  # order alone: script faster in 10 of 20
        ("scripting is faster", REPRODUCED),  # all 20
    ],
)
def test_the_book_s_cold_loop_is_judged_apart_from_its_order(machine, verdict):
    """The book's eager-first cold loop favours whichever runs second: alternating the order
    across fresh processes leaves an order effect short of the sign test."""
    orders = []

    def run(order, seed, batch, n_calls, device, threads):
        orders.append(order)
        if machine == "scripting is faster":
            return {"eager": 1.0, "script": 0.8}
        return {order[0]: 1.0, order[1]: 0.9}

    rows = hybridize_cold.cold_pairs(
        "hyb.batch1.naive", 1, n_calls=1, device="cpu", seed=0, run=run
    )
    assert orders[:2] == [("eager", "script"), ("script", "eager")]
    assert verdict_of("hyb.bench.naive", rows) == verdict


def test_each_cold_pair_runs_in_a_child_of_its_own_forked_from_one_server():
    with (
        hybridize_cold.fork_server("os", "getpid") as pid,
        hybridize_cold.fork_server("os", "getppid") as parent,
    ):
        assert len({pid(), pid(), pid()}) == 3
        assert len({parent(), parent()}) == 1
    with hybridize_cold.fork_server(hybridize_cold.__name__, "cold_pair") as run:
        seconds = run(("script", "eager"), 1, 1, 3, "cpu", 1)
        assert set(seconds) == {"eager", "script"} and min(seconds.values()) > 0
        with pytest.raises(RuntimeError, match="no-such-device"):
            run(("eager",), 1, 1, 3, "no-such-device", 1)
        assert run(("eager",), 1, 1, 3, "cpu", 1)["eager"] > 0  # the server serves on


def test_a_child_that_leaves_no_reply_or_a_server_that_cannot_start_says_why():
    with hybridize_cold.fork_server("os", "abort") as abort:
        with pytest.raises(RuntimeError, match="the child ended with status -6"):
            abort()
    with hybridize_cold.fork_server("no_such_module", "f") as missing:
        with pytest.raises(RuntimeError, match="No module named 'no_such_module'"):
            missing()
    with hybridize_cold.fork_server("builtins", "print") as printing:
        assert printing("to stderr, not into the replies") is None
    with hybridize_cold.fork_server("operator", "mul") as repeat:
        assert repeat("x", 1 << 20) == "x" * (1 << 20)  # longer than a pipe holds


def test_a_server_that_closes_its_output_before_it_ends_says_why(tmp_path, monkeypatch):
    """The end of its output comes before its exit: the reason is still its own."""
    (tmp_path / "closes_early.py").write_text(
        "import os, time\nos.close(1)\ntime.sleep(1)\nraise SystemExit('closed, then ended')\n"
    )
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    with hybridize_cold.fork_server("closes_early", "f") as call:
        with pytest.raises(RuntimeError, match="closed, then ended"):
            call()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"  # dead, not yet reaped
    except FileNotFoundError:
        return True


def test_a_call_past_its_time_stops_the_server_and_the_child_that_runs_it(tmp_path):
    """A hung loop would hold a core through the timings that follow; and the server, had it
    lived on, would answer the next call with this one's late reply."""
    pid_file = tmp_path / "pid"
    with hybridize_cold.fork_server("os", "system", timeout=1) as shell:
        with pytest.raises(RuntimeError, match="no reply in 1 s"):
            shell(f"echo $$ > {pid_file}; exec sleep 30")
        with pytest.raises(RuntimeError, match="the server was stopped: no reply in 1 s"):
            shell("true")
        pid = int(pid_file.read_text())
        deadline = time.monotonic() + 5
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(pid)


def test_the_server_s_imports_leave_torchscript_nothing_compiled():
    """What makes a forked child as cold as a fresh interpreter: importing what the server
    imports scripts and compiles nothing."""
    check = (
        "import torch, d2lrepro.performance.hybridize_cold; "
        "assert not torch.jit._recursive.concrete_type_store.type_store"
    )
    subprocess.run([sys.executable, "-c", check], check=True)


def test_a_forked_child_collects_none_of_the_server_s_objects():
    """A collection in the child would write to every object the server made, copying the
    pages they share with it: the server freezes them, and the child finds them frozen."""
    with hybridize_cold.fork_server("gc", "get_freeze_count") as frozen:
        assert frozen() > 1000


def test_a_failed_process_fails_every_metric_with_its_error():
    def broken(*args):
        raise RuntimeError("the child ended with status 1")

    rows = hybridize_cold.cold_pairs("hyb.batch1.naive", 1, 1, "cpu", seed=0, run=broken)
    assert [r["metric"] for r in rows] == [f"hyb.batch1.naive.{m}" for m in hybridize_cold.NAMES]
    assert {(r["status"], r["note"]) for r in rows} == {
        ("failed", "the cold loop's process failed: the child ended with status 1")
    }


def test_each_pair_times_a_network_of_its_own_and_the_sign_test_counts_the_wins():
    seeds = []

    def run(order, seed, batch, n_calls, device, threads):
        seeds.append(seed)
        return {"eager": 1.0, "script": 0.8 if seed % 2 else 1.2}

    rows = hybridize_cold.cold_pairs("n", 1, 1, "cpu", seed=10, pairs=4, run=run)
    assert seeds == [11, 12, 13, 14]
    values = {r["metric"]: r["value"] for r in rows}
    assert values == {
        "n.script_faster_pairs": 2,
        "n.pairs": 4,
        "n.script_faster_sign_p": 11 / 16,
        "n.least_p": 1 / 16,  # 4 pairs cannot reach p < 0.05, even all agreeing
    }
