"""What a run found, in sentences made from its verdicts (d2lrepro.pipeline.findings)."""

import pytest

from conftest import measured_on
from d2lrepro.core import devices
from d2lrepro.core.results import metric, not_applicable
from d2lrepro.pipeline import checks, claims, findings
from d2lrepro.pipeline.claims import (
    INCONCLUSIVE,
    NOT_APPLICABLE,
    NOT_REPRODUCED,
    RAN_BESIDE_OTHERS,
    REPRODUCED,
)
from d2lrepro.pipeline.scaling import OVERRIDE_JUDGES

# Whose claim each is: a.3 the study notes', the rest the book's own.
CLAIMED_BY = {"a.3": "study_notes"}
LEDGER = {
    "chapters": {
        "opt": {"title": "Optimization algorithms", "covers": "§12.1", "leaves_out": []},
        "perf": {"title": "Computational performance", "covers": "§13.1", "leaves_out": []},
    },
    "sources": {
        "book": {"label": "the book", "kind": "book"},
        "study_notes": {"label": "the study notes", "kind": "notes"},
    },
    "sections": [
        {
            "id": section,
            "chapter": chapter,
            "claims": [
                {"id": f"{section}.{i}", "claimed_by": CLAIMED_BY.get(f"{section}.{i}", "book")}
                for i in range(1, 5)
            ],
        }
        for section, chapter in (("a", "opt"), ("b", "perf"))
    ],
}
SCALED = "judged at the book's scale only: preset cpu scaled lr_schedules.epochs = 6 (book: 30)"


def row(cid, section, verdict, kind="measurement", reason=""):
    return {"id": cid, "section": section, "verdict": verdict, "kind": kind, "reason": reason}


ROWS = [
    row("a.1", "a", REPRODUCED),
    row("a.2", "a", REPRODUCED, kind="output"),
    row("a.3", "a", NOT_REPRODUCED, reason="failed: a.speedup = 1.61x (needs < 1.2x)")
    | {
        "headline": "Two devices give no speed-up",
        "printed": "1.1x",
        "device": "cpu",
        "explanation": "computation outweighs",
    },
    row("a.4", "a", NOT_APPLICABLE, reason=SCALED),
    row("b.1", "b", NOT_APPLICABLE, reason="needs CUDA, the job that measured it could use none"),
    row(
        "b.2",
        "b",
        NOT_APPLICABLE,
        reason="needs 2 GPUs, the job that measured it could use none",
    ),
    row("b.3", "b", NOT_APPLICABLE, reason="needs CUDA, the job that measured it could use none"),
]


def test_each_chapter_says_what_held_what_did_not_and_what_was_not_judged():
    opt, perf = findings.findings(LEDGER, ROWS, "cpu")
    assert opt["title"] == "Optimization algorithms"
    assert opt["sentence"] == (
        "This run judged 3 of the chapter's 4 claims: 2 held (1 measurement, 1 printed output)"
        " and 1 did not. Of the book's own claims, 2 held and 0 did not; of the others (the"
        " study notes), 0 held and 1 did not. Not judged here: 1 scaled by the cpu preset."
    )
    assert opt["failures"] == [
        {
            "id": "a.3",
            "headline": "Two devices give no speed-up",
            "whose": "claimed by the study notes",
            "printed": "1.1x",
            "measured": "a.speedup = 1.61x (needs < 1.2x)",
            "plain": "",
            "device": "cpu",
            "hosts": "",  # one machine measured: the report's first line names it
            "explanation": "computation outweighs",
        }
    ]
    hosted = [r | {"hosts": "node2"} for r in ROWS]
    assert findings.findings(LEDGER, hosted, "cpu", hosts=True)[0]["failures"][0]["hosts"] == (
        "node2"
    )
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
        (f"{SCALED} ({OVERRIDE_JUDGES})", "scaled by values given with --config or --configfile"),
        ("needs CUDA, the job that measured it could use none", "need a GPU"),
        ("needs 2 GPUs, the job that measured it (on n1) could use none", "need 2 GPUs"),
        ("needs 2 devices, the job that measured it could use 1 (1 GPU)", "need 2 devices"),
        # the hardware first: a scale named beside it does not make it a scaled claim
        (
            f"needs 2 devices, the job that measured it could use 1 (1 GPU); {SCALED}",
            "need 2 devices",
        ),
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


def test_inconclusive_claims_are_counted_apart_from_those_that_did_not_hold():
    """A run whose spread straddles the bound did not contradict the book: the sentence counts
    it as inconclusive, not among the claims that did not hold, and lists what it measured in
    plain words (its spread's two ends and the bound, no "IQR")."""
    check = "a.speedup = 1.1x, spread 0.9x to 1.3x (needs < 1.2x)"
    unsure = {"verdict": INCONCLUSIVE, "reason": f"{check}, {checks.WITHIN_NOISE}"}
    rows = [r | unsure if r["id"] == "a.3" else r for r in ROWS]
    opt = findings.findings(LEDGER, rows, "cpu")[0]
    assert opt["sentence"].startswith(
        "This run judged 3 of the chapter's 4 claims: 2 held (1 measurement, 1 printed output),"
        " 0 did not and 1 was inconclusive (this run could not tell which side of its bound it"
        " lies on)."
    )
    assert opt["failures"] == []
    assert opt["inconclusive"] == [
        {
            "id": "a.3",
            "headline": "Two devices give no speed-up",
            "measured": check,
            "plain": "",
            "device": "cpu",
            "hosts": "",
        }
    ]
    assert "IQR" not in opt["sentence"] + str(opt["inconclusive"])
    plain = findings.findings(LEDGER, ROWS, "cpu")[0]
    assert "inconclusive" not in plain["sentence"] and plain["inconclusive"] == []


def test_two_devices_and_two_cuda_devices_are_one_count_on_a_gpu_machine(cuda_count):
    """On one GPU: a claim that requires 2 CUDA devices (judged from its job's machine
    record) and one whose 2-device run could not start (its metric's note, written by the
    job) lack the same: one phrasing, one group. They were "1 needs 2 GPUs, 1 needs 2
    devices"."""
    cuda_count(1)
    check = {"kind": "above", "metric": "a", "bound": 0}
    gpu = {"cuda_devices": 1, "usable_cores": 16}
    base = {"statement": "s", "printed": "b", "evidence": "m.csv", "checks": [check]}
    needs_cuda = base | {"id": "b.1", "requires": {"cuda_devices": 2}}
    rows = [
        claims.evaluate_claim(needs_cuda, *measured_on([metric("a", 1.0)], gpu)),
        claims.evaluate_claim(
            base | {"id": "b.2"}, *measured_on([not_applicable("a", devices.unavailable(2))], gpu)
        ),
    ]
    assert rows[0]["reason"] == rows[1]["reason"]
    rows = [r | {"section": "b", "kind": "measurement"} for r in rows]
    assert findings.not_judged(rows, "cpu") == "2 need 2 devices"


def record(gpus: int, cores: int, names=()) -> dict:
    return {"cuda_devices": gpus, "usable_cores": cores, "gpus": list(names)}


LACKING = [
    row(
        "b.4",
        "b",
        NOT_APPLICABLE,
        reason="needs 2 devices, the job that measured it could use 1 (1 GPU)",
    )
]


def test_what_a_device_is_is_said_once_with_whether_the_claims_on_several_can_be_judged():
    on_gpu = findings.devices_here([record(1, 16, ["NVIDIA H200"])], ROWS + LACKING, "cpu")
    assert on_gpu.startswith("A device here is a GPU: this run's jobs could use at most 1")
    assert "cores do not stand in" in on_gpu
    assert on_gpu.endswith(
        "So the claims about several devices cannot be judged here: 1 needs 2 devices; a"
        " machine whose jobs can use 2 GPUs judges them, and one whose jobs can use 2 cores"
        " and no GPU those of them that do not need CUDA."
    )
    laptop = findings.devices_here([record(0, 2)], ROWS, "cpu")
    assert laptop.startswith("A device here is one CPU core, a worker process pinned to it")
    assert laptop.endswith(
        "So the claims about several devices are judged here (3 claims that need GPUs aside)."
    )
    cluster = findings.devices_here([record(0, 4), record(2, 16, ["H", "H"])], ROWS, "cpu")
    assert "a GPU for a job that could use GPUs (at most 2: H)" in cluster
    assert "for a job that could not (at most 4 cores)" in cluster
