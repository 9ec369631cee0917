"""What a metric must be to be judged at all (d2lrepro.pipeline.evidence); that the evaluator
stops on each of these is tested in tests/pipeline/test_claims.py."""

import math

import pandas as pd
import pytest

from d2lrepro.core.results import metric
from d2lrepro.pipeline import evidence


def test_a_metric_without_a_number_has_a_known_status_and_says_why():
    rows = pd.DataFrame([metric("a", 2.0), metric("b", math.nan, status="failed", note="crashed")])
    assert list(evidence.statuses(rows, "m.csv")) == ["", "failed"]
    silent = pd.DataFrame([metric("b", math.nan) | {"status": "failed"}])
    with pytest.raises(ValueError, match=r"m\.csv: metric b is 'failed' without a note saying why"):
        evidence.statuses(silent, "m.csv")


def test_a_unit_is_known_and_the_one_the_metric_s_name_says():
    rows = pd.DataFrame([metric("a_s", 1.0), metric("b", 2.0, "x")])
    assert evidence.units(rows, "m.csv") == {"a_s": "s", "b": "x"}
    with pytest.raises(ValueError, match=r"m\.csv: metric a_s has unit 'x', but its name says 's'"):
        evidence.units(pd.DataFrame([metric("a_s", 1.0, "x")]), "m.csv")
    with pytest.raises(ValueError, match=r"m\.csv has no unit column"):
        evidence.units(pd.DataFrame([{"metric": "a", "value": 1.0}]), "m.csv")


def test_a_number_outside_its_domain_or_not_finite_says_which():
    assert evidence.no_number("a_s", -1.0, "s", str) == "a_s = -1 s (a time is positive)"
    assert evidence.no_number("a_s", math.inf, "s", str) == "a_s = inf s"


def test_the_runs_of_a_typical_run_check_are_counted_and_in_order():
    claim = {"evidence": "m.csv", "checks": [{"kind": "typical", "metric": "a"}]}
    runs = {"a_min": 0.1, "a_q1": 0.2, "a_q3": 0.3, "a_max": 0.4, "a_runs": 20.0}
    evidence.check_spreads(claim, runs, set(runs))
    for broken in ({"a_q1": 0.35}, {"a_max": 0.25}, {"a_runs": 0.0}, {"a_runs": 2.5}):
        with pytest.raises(ValueError, match=r"m\.csv: runs out of order or uncounted: a_min"):
            evidence.check_spreads(claim, runs | broken, set(runs))
    # No number at all is judged as one: "no number was measured", not a stopped rule.
    evidence.check_spreads(claim, runs | {"a_runs": math.inf, "a_q1": math.nan}, set(runs))
