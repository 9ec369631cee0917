import time

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
