"""The spreads of the cost model's ratios (d2lrepro.multidevice.parts.cost_spans)."""

import pytest

from d2lrepro.multidevice.parts import cost_spans

# t1 and t2 nearly equal, a step 1.9 times the longer: each time's IQR over repeats 0.2 s.
ROW = {"t1": 2.0, "t2": 2.1, "measured_step": 4.0, "t1_iqr": 0.2, "t2_iqr": 0.2, "step_iqr": 0.2}


def test_a_time_spans_half_its_iqr_each_way_and_max_and_sum_follow_t1_and_t2():
    assert cost_spans.span(ROW, "t1") == pytest.approx((1.9, 2.1))
    assert cost_spans.span(ROW, "measured_step") == pytest.approx((3.9, 4.1))
    assert cost_spans.span(ROW, "max") == pytest.approx((2.0, 2.2))
    assert cost_spans.span(ROW, "sum") == pytest.approx((3.9, 4.3))


def test_each_ratio_spans_from_its_pessimistic_to_its_optimistic_ends():
    assert cost_spans.t1_over_t2_width(ROW) == pytest.approx(2.1 / 2.0 - 1.9 / 2.2)
    to_max, from_max, from_sum = cost_spans.step_widths(ROW)
    assert to_max == pytest.approx(4.1 / 2.0 - 3.9 / 2.2)
    assert from_max == pytest.approx(to_max)  # the whole span lies above 1
    # The span of step / (t1 + t2) holds 1: its distance from 1 reaches down to 0.
    assert from_sum == pytest.approx(max(abs(3.9 / 4.3 - 1), abs(4.1 / 3.9 - 1)))
