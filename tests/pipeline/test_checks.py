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
    ({"kind": "within", "metric": "a", "target": 1.02, "tol": 0.1}, True),
    ({"kind": "within", "metric": "a", "target": 0.88, "tol": 0.1}, False),
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


def test_a_window_holds_only_with_the_whole_spread_inside_it():
    """within: the end of the spread farther from the target decides; where only the nearer
    end is inside the window, it is within the noise."""
    check = {"kind": "within", "metric": "a", "target": 1.0, "tol": 0.1}
    inside = checks.apply(check | {"spread": {"a": "s"}}, {"a": 1.05, "s": 0.08}.__getitem__)
    assert inside.passed
    straddles = checks.apply(check | {"spread": {"a": "s"}}, {"a": 1.05, "s": 0.2}.__getitem__)
    assert not straddles.passed and straddles.within_noise
    assert "spread 0.95 to 1.15" in straddles.measured
    outside = checks.apply(check | {"spread": {"a": "s"}}, {"a": 1.2, "s": 0.1}.__getitem__)
    assert not outside.passed and not outside.within_noise


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


UNITS = {"slow_s": "s", "fast_s": "s", "pinned_bytes": "B", "sync_bytes": "B", "sign_p": "p"}
UNITS |= {"lat_us": "µs", "excess": "|Δ|", "speedup": "x", "speedup_iqr": "x", "file_sha1": "hex"}
MEASURED = {"slow_s": 0.041361, "fast_s": 0.0210855, "pinned_bytes": 41943046.0}
MEASURED |= {"sync_bytes": 41943040.0, "sign_p": 0.1875, "lat_us": 29.075, "excess": 0.004}
MEASURED |= {"speedup": 1.75, "speedup_iqr": 0.2, "file_sha1": 0x76E5BE1548FD}


@pytest.mark.parametrize(
    "check, text",
    [
        (
            {"kind": "ratio_below", "numerator": "slow_s", "denominator": "fast_s", "bound": 1.42},
            "slow_s / fast_s = 0.041361 s / 0.0210855 s = 1.96x (needs < 1.42x)",
        ),
        (
            {"kind": "ratio_above", "numerator": "pinned_bytes", "denominator": "sync_bytes"}
            | {"bound": 1},
            "pinned_bytes / sync_bytes = 41,943,046 B / 41,943,040 B = 1x (needs > 1x)",
        ),
        (
            {"kind": "exact", "metric": "sync_bytes", "expected": 41943040, "decimals": 0},
            "sync_bytes = 41,943,040 B (needs 41,943,040 B to 0 decimals)",
        ),
        (
            {"kind": "exact", "metric": "file_sha1", "expected": 0x76E5BE1548FF, "decimals": 0},
            "file_sha1 = 76e5be1548fd (needs 76e5be1548ff)",
        ),
        (
            {"kind": "within", "metric": "lat_us", "target": 30, "tol": 2},
            "lat_us = 29.075 µs (needs ± 2 µs of 30 µs)",
        ),
        ({"kind": "below", "metric": "sign_p", "bound": 0.05}, "sign_p = 0.1875 (needs p < 0.05)"),
        ({"kind": "below", "metric": "excess", "bound": 0.02}, "excess = 0.004 (needs |Δ| < 0.02)"),
        (
            {
                "kind": "above",
                "metric": "speedup",
                "bound": 1.8,
                "spread": {"speedup": "speedup_iqr"},
            },
            f"speedup = 1.75x, spread 1.65x to 1.85x (needs > 1.8x), {checks.WITHIN_NOISE}",
        ),
        (
            {"kind": "ordering", "metrics": ["fast_s", "slow_s"], "order": "increasing"},
            "fast_s = 0.0210855 s < slow_s = 0.041361 s (needs fast_s < slow_s)",
        ),
        (
            {"kind": "sum_of_parts", "whole": "slow_s", "parts": ["fast_s", "fast_s"]},
            "slow_s = 0.041361 s, sum of parts 0.0210855 s + 0.0210855 s = 0.042171 s,"
            " sum / whole = 1.02x (needs whole < sum)",
        ),
    ],
)
def test_every_number_of_a_check_carries_its_unit(check, text):
    """Times in seconds, byte counts in full with thousands marked, ratios and speed-ups as
    times, a p-value's or a distance's bound after its name; a spread by its two ends. They
    read "0.041361 / 0.0210855 = 1.96 (needs < 1.42)" and "4.1943e+07 / 4.1943e+07"."""
    assert checks.apply(check, MEASURED.__getitem__, unit=UNITS.__getitem__).measured == text


def test_a_spread_over_an_order_shows_each_metric_s_ends():
    values = {"a_s": 1.0, "b_s": 1.1, "a_iqr": 0.2, "b_iqr": 0.2}
    check = {"kind": "ordering", "metrics": ["a_s", "b_s"], "order": "increasing"}
    check |= {"spread": {"a_s": "a_iqr", "b_s": "b_iqr"}}
    outcome = checks.apply(check, values.__getitem__, unit=lambda m: "s")
    assert outcome.within_noise and outcome.measured == (
        "a_s = 1 s (spread 0.9 s to 1.1 s) < b_s = 1.1 s (spread 1 s to 1.2 s)"
        f" (needs a_s < b_s), {checks.WITHIN_NOISE}"
    )


def test_an_order_the_numbers_break_shows_how_they_compare():
    """Each pair is joined by how its numbers compare, not by the order the claim needs."""
    values = {"a": 0.801, "b": 0.72, "c": 0.72}
    check = {"kind": "ordering", "metrics": ["a", "b", "c"], "order": "increasing"}
    outcome = checks.apply(check, values.__getitem__)
    assert not outcome.passed
    assert outcome.measured == "a = 0.801 > b = 0.72 = c = 0.72 (needs a < b < c)"


def test_a_typical_run_check_names_its_chance_and_the_runs_that_would_judge_it():
    """Every edition beyond every run is a finding with the chance of it named, or out of
    reach with the number of runs that would judge it; meeting only the runs' extremes is
    within their noise."""
    check = {"kind": "typical", "metric": "loss", "low": 0.2425, "high": 0.2445, "editions": 3}
    runs = {"loss": 0.25, "loss_q1": 0.249, "loss_q3": 0.251, "loss_min": 0.248, "loss_max": 0.26}
    many = checks.apply(check, (runs | {"loss_runs": 20}).__getitem__)
    assert not many.passed and not (many.within_noise or many.out_of_reach)
    assert many.measured.endswith("every edition beyond every one of 20 runs, p = 0.0011 by chance")
    few = checks.apply(check, (runs | {"loss_runs": 4}).__getitem__)
    assert few.out_of_reach and few.measured.endswith(
        "p = 0.057 by chance; from 5 runs, such a miss is a finding"
    )
    reaching = checks.apply(check, (runs | {"loss_runs": 20, "loss_min": 0.244}).__getitem__)
    assert reaching.within_noise and not reaching.passed
    assert reaching.measured.endswith(checks.EXTREMES_MEET)
