"""The checks a claim may make (d2lrepro.pipeline.checks): a spread narrows what reproduces,
and a bound inside the spread is said to sit within the noise, on either side of it."""

import pytest

from d2lrepro.pipeline import checks

VALUES = {"a": 1.0, "b": 2.0, "w": 3.0, "p": 1.0, "q": 1.5}


def outcome(check: dict, iqr: float):
    """``check`` applied to VALUES, every metric's IQR ``iqr`` (no spread where 0)."""
    spread = {m: f"{m}_iqr" for m in VALUES} if iqr else {}
    values = VALUES | {f"{m}_iqr": iqr for m in VALUES}
    return checks.apply(check | {"spread": spread}, values.__getitem__)


# Each check kind twice: once met by the medians and once failed by them, each time by a
# margin smaller than half a spread of 0.6 and larger than half one of 0.01.
CASES = [
    ({"kind": "above", "metric": "a", "bound": 0.9}, True),
    ({"kind": "above", "metric": "a", "bound": 1.1}, False),
    ({"kind": "below", "metric": "a", "bound": 1.1}, True),
    ({"kind": "below", "metric": "a", "bound": 0.9}, False),
    ({"kind": "ratio_above", "numerator": "b", "denominator": "a", "bound": 1.9}, True),
    ({"kind": "ratio_above", "numerator": "b", "denominator": "a", "bound": 2.1}, False),
    ({"kind": "ratio_below", "numerator": "b", "denominator": "a", "bound": 2.1}, True),
    ({"kind": "ratio_below", "numerator": "b", "denominator": "a", "bound": 1.9}, False),
    ({"kind": "sum_of_parts", "whole": "w", "parts": ["p", "q"], "bound": 0.8}, True),
    ({"kind": "sum_of_parts", "whole": "w", "parts": ["p", "q"], "bound": 0.9}, False),
    ({"kind": "ordering", "metrics": ["p", "q"], "order": "increasing"}, True),
    ({"kind": "ordering", "metrics": ["q", "p"], "order": "increasing"}, False),
]


@pytest.mark.parametrize("check, medians_pass", CASES)
def test_a_bound_inside_the_spread_fails_within_the_noise_on_either_side(check, medians_pass):
    quiet, noisy = outcome(check, 0.01), outcome(check, 0.6)
    assert quiet.passed == medians_pass
    assert checks.WITHIN_NOISE not in quiet.measured
    assert not noisy.passed and noisy.measured.endswith(checks.WITHIN_NOISE)


@pytest.mark.parametrize("check, medians_pass", CASES)
def test_a_bound_beyond_the_spread_is_judged_plainly(check, medians_pass):
    """Without a spread the medians decide, and a failure says nothing of noise."""
    plain = outcome(check, 0.0)
    assert plain.passed == medians_pass
    assert checks.WITHIN_NOISE not in plain.measured


def test_a_denominator_whose_spread_reaches_zero_can_reach_any_ratio():
    values = {"n": 1.0, "d": 1.0, "d_iqr": 3.0}
    check = {"kind": "ratio_above", "numerator": "n", "denominator": "d", "bound": 5}
    plain = checks.apply(check, values.__getitem__)
    noisy = checks.apply(check | {"spread": {"d": "d_iqr"}}, values.__getitem__)
    assert not plain.passed and checks.WITHIN_NOISE not in plain.measured
    assert not noisy.passed and noisy.measured.endswith(checks.WITHIN_NOISE)


@pytest.mark.parametrize(
    "check",
    [
        {"kind": "ratio_above", "numerator": "big", "denominator": "tiny", "bound": 2},
        {"kind": "sum_of_parts", "whole": "a", "parts": ["big", "big"], "bound": 2},
    ],
)
def test_a_derived_number_that_overflows_fails_as_no_number(check):
    """1e308 / 1e-308 and 1e308 + 1e308 are inf, which is above any bound."""
    values = {"a": 1.0, "big": 1e308, "tiny": 1e-308}
    broken = checks.apply(check, values.__getitem__)
    assert not broken.passed and not broken.finite and "inf" in broken.measured
    sane = checks.apply(check, (values | {"big": 3.0, "tiny": 1.0}).__getitem__)
    assert sane.passed and sane.finite
