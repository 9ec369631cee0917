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
