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


def test_each_spread_reaches_both_ends_of_its_lopsided_span():
    """A quotient's span is wider above its value: half the spread is the wider side, so the
    evaluator's value -+ half holds the whole span."""
    t1_over_t2 = cost_spans.t1_over_t2_spread(ROW)
    low, high = 1.9 / 2.2, 2.1 / 2.0
    assert t1_over_t2 / 2 == pytest.approx(max(2 / 2.1 - low, high - 2 / 2.1))
    to_max, from_max, from_sum = cost_spans.step_spreads(ROW)
    assert to_max / 2 == pytest.approx(4.1 / 2.0 - 4.0 / 2.1)  # the upper side is wider
    assert from_max == pytest.approx(to_max)  # the whole span lies above 1
    # step / (t1 + t2) spans 3.9 / 4.3 to 4.1 / 3.9, holding 1: its distance reaches down to 0.
    point = abs(4 / 4.1 - 1)
    assert from_sum / 2 == pytest.approx(max(point, (1 - 3.9 / 4.3) - point))
    assert cost_spans.distance((0.9, 1.05)) == pytest.approx((0.0, 0.1))
    assert cost_spans.distance((1.2, 1.5)) == pytest.approx((0.2, 0.5))
