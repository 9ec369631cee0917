"""What a run found, in sentences made from its verdicts (d2lrepro.pipeline.findings)."""

import pytest

from d2lrepro.pipeline import checks, findings
from d2lrepro.pipeline.claims import (
    FAILED_WITHIN_NOISE,
    NOT_APPLICABLE,
    NOT_REPRODUCED,
    RAN_BESIDE_OTHERS,
    REPRODUCED,
)

LEDGER = {
    "chapters": {"opt": "Optimization algorithms", "perf": "Computational performance"},
    "sections": [{"id": "a", "chapter": "opt"}, {"id": "b", "chapter": "perf"}],
}
SCALED = "judged at the book's scale only: preset cpu scaled lr_schedules.epochs = 6 (book: 30)"


def row(cid, section, verdict, kind="measurement", reason=""):
    return {"id": cid, "section": section, "verdict": verdict, "kind": kind, "reason": reason}


ROWS = [
    row("a.1", "a", REPRODUCED),
    row("a.2", "a", REPRODUCED, kind="output"),
    row("a.3", "a", NOT_REPRODUCED, reason="failed: a.speedup = 1.61 (needs < 1.2)")
    | {"headline": "Two devices give no speed-up", "explanation": "computation outweighs"},
    row("a.4", "a", NOT_APPLICABLE, reason=SCALED),
    row("b.1", "b", NOT_APPLICABLE, reason="needs CUDA, the job that measured it could use none"),
    row(
        "b.2",
        "b",
        NOT_APPLICABLE,
        reason="needs 2 CUDA devices, the job that measured it could use 0",
    ),
    row("b.3", "b", NOT_APPLICABLE, reason="needs CUDA, the job that measured it could use none"),
]


def test_each_chapter_says_what_held_what_did_not_and_what_was_not_judged():
    opt, perf = findings.findings(LEDGER, ROWS, "cpu")
    assert opt["title"] == "Optimization algorithms"
    assert opt["sentence"] == (
        "This run judged 3 of the chapter's 4 claims: 2 held (1 measurement, 1 printed output)"
        " and 1 did not. Not judged here: 1 scaled by the cpu preset."
    )
    assert opt["failures"] == [
        {
            "id": "a.3",
            "headline": "Two devices give no speed-up",
            "measured": "a.speedup = 1.61 (needs < 1.2)",
            "explanation": "computation outweighs",
        }
    ]
    assert perf["sentence"] == (
        "This run judged 0 of the chapter's 3 claims."
        " Not judged here: 2 need a GPU, 1 needs 2 GPUs."
    )
    assert perf["failures"] == []


def test_a_changed_verdict_changes_the_sentences():
    """Nothing is typed for a run: the sentences follow the verdicts."""
    before = findings.findings(LEDGER, ROWS, "cpu")
    now_held = [r | {"verdict": REPRODUCED} if r["id"] == "a.3" else r for r in ROWS]
    after = findings.findings(LEDGER, now_held, "cpu")
    assert after[0]["sentence"] != before[0]["sentence"]
    assert "3 held (2 measurements, 1 printed output) and 0 did not" in after[0]["sentence"]
    assert after[0]["failures"] == []
    assert findings.findings(LEDGER, ROWS, "smoke")[0]["sentence"].endswith("smoke preset.")


@pytest.mark.parametrize(
    "reason, group",
    [
        (SCALED, "scaled by the cpu preset"),
        ("needs CUDA, this machine has none", "need a GPU"),
        ("needs 2 CUDA devices, the job that measured it (on n1) could use 1", "need 2 GPUs"),
        ("needs 2 devices, this machine has 1 GPU", "need 2 devices"),
        ("needs 2 CPU cores, the job that measured it could use 1", "need 2 CPU cores"),
        ("not run: not among the configured modes", "not run: not among the configured modes"),
        (RAN_BESIDE_OTHERS, "timed beside other jobs"),
    ],
)
def test_claims_not_judged_for_one_reason_fold_together(reason, group):
    assert findings.reason_group(reason, "cpu") == group


def test_the_largest_group_comes_first_and_judged_claims_are_not_folded():
    groups = findings.folded(ROWS, "cpu")
    assert [(g["why"], [r["id"] for r in g["rows"]]) for g in groups] == [
        ("need a GPU", ["b.1", "b.3"]),
        ("scaled by the cpu preset", ["a.4"]),
        ("need 2 GPUs", ["b.2"]),
    ]


def test_claims_whose_every_failed_check_sat_within_its_noise_are_counted_apart():
    """A run whose spread straddles the bound did not contradict the book: the sentence says
    how many of the claims that did not hold sat within their noise, and lists what each
    measured."""
    check = f"a.speedup = 1.1 + IQR/2 = 1.3 (needs < 1.2), {checks.WITHIN_NOISE}"
    rows = [r | {"reason": FAILED_WITHIN_NOISE + check} if r["id"] == "a.3" else r for r in ROWS]
    opt = findings.findings(LEDGER, rows, "cpu")[0]
    assert "and 1 did not (1 of them within their measured noise)." in opt["sentence"]
    assert opt["failures"][0]["measured"] == check
    assert "noise" not in findings.findings(LEDGER, ROWS, "cpu")[0]["sentence"]
