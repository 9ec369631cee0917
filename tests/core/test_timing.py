import time

import pytest
import torch

from d2lrepro.core import timing

FAST = {"min_run_time": 0.01, "max_run_time": 0.2}


def test_time_fn_statistics_of_a_sleep():
    measured = timing.time_fn(lambda: time.sleep(0.002), "cpu", **FAST)
    assert measured["median"] >= 0.002 and measured["iqr"] >= 0 and measured["runs"] > 0


def test_time_fn_of_a_cheap_function_keeps_thread_count():
    threads = torch.get_num_threads()
    measured = timing.time_fn(torch.ones(10).sum, "cpu", **FAST)
    assert 0 < measured["median"] < 0.01 and measured["iqr"] >= 0 and measured["runs"] > 0
    assert torch.get_num_threads() == threads


def test_naive_time_is_one_call():
    calls = []
    assert timing.naive_time(lambda: (calls.append(1), time.sleep(0.01)), "cpu", sync=True) >= 0.01
    assert calls == [1]


def test_clock_times_its_block():
    with timing.Clock("cpu") as clock:
        time.sleep(0.01)
    assert 0.01 <= clock.seconds < 1


def test_alternated_turns_the_order_of_the_parts_every_round():
    calls = []
    parts = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    seconds = timing.alternated(parts, "cpu", min_rounds=3, max_rounds=3, max_run_time=0)
    # one warm-up call each, then a b c, b c a, c a b
    assert "".join(calls) == "abc" + "abc" + "bca" + "cab"
    assert {name: len(s) for name, s in seconds.items()} == dict.fromkeys("abc", 3)


def test_spread_is_the_median_and_iqr_of_the_values():
    assert timing.spread([1.0, 2.0, 3.0, 4.0, 5.0]) == {"median": 3.0, "iqr": 2.0, "runs": 5}


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_stamps_give_seconds_since_the_first_with_their_counts(device):
    """On a GPU (the fake CUDA's one on a machine without) each stamp is an event on the
    device's queue, read once at the end; on the CPU, the clock."""
    import fake_cuda

    with fake_cuda.cuda_here(1):
        stamps = timing.Stamps(device)
        for count in (256, 512, 768):
            stamps.stamp(count)
            time.sleep(0.01)
        seconds = stamps.seconds()
    assert [count for _, count in seconds] == [256, 512, 768]
    assert seconds[0][0] == 0 and 0 < seconds[1][0] < seconds[2][0]
