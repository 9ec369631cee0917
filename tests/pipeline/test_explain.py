"""Why a claim differs from the book, where this run measured it (d2lrepro.pipeline.explain)."""

import math

import pandas as pd
import pytest

from d2lrepro.core.results import metric, not_applicable
from d2lrepro.pipeline import claims, explain

CLAIM = {
    "id": "s.speed",
    "evidence": "m.csv",
    "explained_by": {
        "checks": [{"kind": "above", "metric": "t1_over_t2", "bound": 1}],
        "because": "computation took {t1_over_t2:.2f}x its communication",
    },
}


def rows(ratio):
    return pd.DataFrame([metric("t1_over_t2", ratio), metric("speedup", 1.6)])


def test_the_sentence_is_filled_where_its_conditions_hold():
    assert explain.explanation(CLAIM, rows(238.4)) == "computation took 238.40x its communication"


@pytest.mark.parametrize("ratio", [0.5, math.nan])
def test_where_the_conditions_fail_or_nothing_was_measured_the_run_does_not_explain(ratio):
    assert explain.explanation(CLAIM, rows(ratio)) == explain.NOT_EXPLAINED
    unmeasured = pd.DataFrame([not_applicable("t1_over_t2", "needs 2 devices")])
    assert explain.explanation(CLAIM, unmeasured) == explain.NOT_EXPLAINED


def test_a_sentence_may_name_what_the_summary_noted_beside_a_metric():
    """{metric!note} is the note beside the metric (which setting was slowest); a metric with no
    note leaves the sentence unfilled, so the run does not explain it."""
    claim = CLAIM | {
        "explained_by": CLAIM["explained_by"] | {"because": "{t1_over_t2!note} took {t1_over_t2}"}
    }
    noted = pd.DataFrame([metric("t1_over_t2", 3.0, note="adadelta.concise (torch.optim)")])
    assert explain.explanation(claim, noted) == "adadelta.concise (torch.optim) took 3"
    assert explain.explanation(claim, rows(3.0)) == explain.NOT_EXPLAINED


def test_a_claim_without_an_explanation_says_so():
    assert explain.explanation({"id": "s.x", "evidence": "m.csv"}, rows(2)) == (
        "not explained by this run"
    )


def test_a_sentence_naming_a_metric_the_file_lacks_is_an_error():
    spec = CLAIM["explained_by"] | {"because": "{nope} and {t1_over_t2}"}
    with pytest.raises(KeyError, match="nope"):
        explain.explanation(CLAIM | {"explained_by": spec}, rows(2))


BATCHES = {
    "depends_on": ["hybridize.batch_sizes"],
    "checks": [
        {
            "kind": "ordering",
            "metrics": ["hyb.batch1.ratio", "hyb.batch64.ratio"],
            "order": "increasing",
        }
    ],
    "because": "{hyb.batch1.ratio:.2f}x at batch 1, {hyb.batch64.ratio:.2f}x at batch 64",
}
BATCH_1 = pd.DataFrame([metric("hyb.batch1.ratio", 0.4)])


def test_a_metric_left_out_by_a_changed_setting_leaves_the_claim_unexplained():
    """A run that drops batch 64 measures nothing that explains the claim; a run that keeps
    it, or changes a setting the explanation does not depend on, has a broken ledger."""
    claim = CLAIM | {"explained_by": BATCHES}
    dropped = [("hybridize.batch_sizes", [1, 64, 1024], [1, 1024])]
    assert explain.explanation(claim, BATCH_1, dropped) == explain.NOT_EXPLAINED
    both = pd.concat([BATCH_1, pd.DataFrame([metric("hyb.batch64.ratio", 0.7)])])
    assert explain.explanation(claim, both, dropped) == "0.40x at batch 1, 0.70x at batch 64"
    for deviations in ([], [("hybridize.batch_sizes", [1, 64, 1024], [1, 64])]):
        with pytest.raises(KeyError, match="batch64"):
            explain.explanation(claim, BATCH_1, deviations)
    unrelated = [("hybridize.n_calls", 1000, 100)]
    with pytest.raises(KeyError, match="batch64"):
        explain.explanation(claim, BATCH_1, unrelated)
    # A metric only the conditions name is held to the same rule as the sentence's.
    quiet = BATCHES | {"because": "{hyb.batch1.ratio:.2f}x at batch 1"}
    with pytest.raises(KeyError, match="batch64"):
        explain.explanation(CLAIM | {"explained_by": quiet}, BATCH_1)
    assert explain.explanation(CLAIM | {"explained_by": quiet}, BATCH_1, dropped) == (
        explain.NOT_EXPLAINED
    )


def test_the_deviations_reach_each_explanation():
    ledger = {"sections": [{"claims": [CLAIM | {"explained_by": BATCHES}]}]}
    table = pd.DataFrame(
        [{"id": "s.speed", "verdict": claims.NOT_REPRODUCED, "reason": "failed: x"}]
    )
    dropped = [("hybridize.batch_sizes", [1, 64], [1])]
    out = explain.explain(ledger, table, lambda path: BATCH_1, dropped)
    assert list(out["explanation"]) == [explain.NOT_EXPLAINED]
    with pytest.raises(KeyError):
        explain.explain(ledger, table, lambda path: BATCH_1)


def test_only_claims_not_reproduced_are_explained_each_from_its_evidence():
    ledger = {
        "sections": [
            {"claims": [CLAIM, {"id": "s.ok", "evidence": "m.csv"}]},
        ]
    }
    table = pd.DataFrame(
        [
            {"id": "s.speed", "verdict": claims.NOT_REPRODUCED, "reason": "failed: speedup"},
            {"id": "s.ok", "verdict": claims.REPRODUCED, "reason": ""},
        ]
    )
    read = []
    out = explain.explain(ledger, table, lambda path: read.append(path) or rows(3))
    assert list(out["explanation"]) == ["computation took 3.00x its communication", ""]
    assert read == ["m.csv"]  # read once, for the claim that needs it


@pytest.mark.parametrize(
    "reason", ["the run failed: lenet.2 seed 0 diverged", "no number was measured: speedup = nan"]
)
def test_a_run_that_failed_or_measured_nothing_is_not_explained_by_a_difference(reason):
    """The conditions may hold on other metrics, but nothing was compared with the book."""
    ledger = {"sections": [{"claims": [CLAIM]}]}
    table = pd.DataFrame([{"id": "s.speed", "verdict": claims.NOT_REPRODUCED, "reason": reason}])
    out = explain.explain(ledger, table, lambda path: rows(3))
    assert list(out["explanation"]) == [explain.NOT_EXPLAINED]


def test_a_plain_sentence_gives_this_runs_numbers_and_ratios_in_the_books_units():
    """A claim's ``plain``: its placeholders filled from the run's metrics, "{a / b}" with their
    ratio and "{m!note}" with a note; nothing where a number is missing, none or zero below
    a ratio, or a note it shows is empty."""
    measured = pd.DataFrame(
        [metric("slow", 0.087, "s", note="adadelta"), metric("fast", 0.0432, "s", note="")]
    )
    plain = "{slow!note} took {slow:.3g} s and the fastest {fast:.3g} s: {slow / fast:.2f}x"
    assert (
        explain.plain_words(plain, measured)
        == "adadelta took 0.087 s and the fastest 0.0432 s: 2.01x"
    )
    assert explain.plain_words("{fast!note}", measured) == ""
    assert explain.plain_words("{missing:.2f} s", measured) == ""
    zero = pd.DataFrame([metric("slow", 0.087, "s"), metric("fast", 0.0, "s")])
    assert explain.plain_words("{slow / fast:.2f}x", zero) == ""
    ledger = {"sections": [{"claims": [{"id": "a.b", "evidence": "m.csv", "plain": plain}]}]}
    ledger["sections"][0]["claims"].append({"id": "a.c", "evidence": "m.csv"})
    table = explain.in_plain_words(ledger, pd.DataFrame({"id": ["a.b", "a.c"]}), lambda p: measured)
    assert list(table["plain"]) == [explain.plain_words(plain, measured), ""]
