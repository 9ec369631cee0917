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


def test_alternated_turns_the_order_of_the_parts_every_round():
    calls = []
    parts = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    seconds = timing.alternated(parts, "cpu", min_rounds=3, max_rounds=3, max_run_time=0)
    # one warm-up call each, then a b c, b c a, c a b
    assert "".join(calls) == "abc" + "abc" + "bca" + "cab"
    assert {name: len(s) for name, s in seconds.items()} == dict.fromkeys("abc", 3)


def test_spread_is_the_median_and_iqr_of_the_values():
    assert timing.spread([1.0, 2.0, 3.0, 4.0, 5.0]) == {"median": 3.0, "iqr": 2.0, "runs": 5}
