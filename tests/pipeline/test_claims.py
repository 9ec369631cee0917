import math
import re
import unicodedata

import jsonschema
import pandas as pd
import pytest

from conftest import REPO, measured_on, shipped_claims
from d2lrepro.core import shortfall
from d2lrepro.core.results import failed, metric, not_applicable
from d2lrepro.pipeline import checks, claims, scaling, settings

METRICS = pd.DataFrame(
    [
        metric("a", 2.0),
        metric("b", 1.0),
        metric("c", 0.5),
        metric("t", 0.0013409),
        not_applicable("gpu_time", "no CUDA device"),
    ]
)
CPU_ONLY = {"cuda_devices": 0}


def verdict(*checks, requires=None, env=CPU_ONLY):
    claim = {
        "id": "x.y",
        "statement": "s",
        "printed": "b",
        "evidence": "m.csv",
        "checks": list(checks),
    }
    if requires:
        claim["requires"] = requires
    return claims.evaluate_claim(claim, *measured_on(METRICS, env))


@pytest.mark.parametrize(
    "check, passes",
    [
        ({"kind": "above", "metric": "a", "bound": 1.5}, True),
        ({"kind": "above", "metric": "a", "bound": 2.5}, False),
        ({"kind": "below", "metric": "c", "bound": 1}, True),
        ({"kind": "below", "metric": "c", "bound": 0.5}, False),
        ({"kind": "within", "metric": "a", "target": 2.1, "tol": 0.2}, True),
        ({"kind": "within", "metric": "a", "target": 2.5, "tol": 0.2}, False),
        ({"kind": "within", "metric": "a", "target": 2.1, "tol": 0.05, "relative": True}, True),
        ({"kind": "within", "metric": "a", "target": 2.5, "tol": 0.05, "relative": True}, False),
        ({"kind": "ratio_above", "numerator": "a", "denominator": "b", "bound": 1.8}, True),
        ({"kind": "ratio_above", "numerator": "b", "denominator": "a", "bound": 1.8}, False),
        ({"kind": "ratio_below", "numerator": "c", "denominator": "a", "bound": 0.3}, True),
        ({"kind": "ratio_below", "numerator": "a", "denominator": "c", "bound": 0.3}, False),
        ({"kind": "sum_of_parts", "whole": "a", "parts": ["b", "b", "c"]}, True),
        ({"kind": "sum_of_parts", "whole": "a", "parts": ["b", "c"]}, False),
        ({"kind": "exact", "metric": "t", "expected": 0.0013, "decimals": 4}, True),
        ({"kind": "exact", "metric": "t", "expected": 0.0013, "decimals": 6}, False),
        ({"kind": "ordering", "metrics": ["c", "b", "a"], "order": "increasing"}, True),
        ({"kind": "ordering", "metrics": ["a", "b", "c"], "order": "increasing"}, False),
        ({"kind": "ordering", "metrics": ["a", "b", "c"], "order": "decreasing"}, True),
    ],
)
def test_each_check_kind_passes_and_fails(check, passes):
    row = verdict(check)
    assert row["verdict"] == (claims.REPRODUCED if passes else claims.NOT_REPRODUCED)
    assert row["measured"]  # the measured numbers are always shown
    assert bool(row["reason"]) != passes  # a failure says which check failed


def test_all_checks_must_pass():
    row = verdict(
        {"kind": "above", "metric": "a", "bound": 0}, {"kind": "below", "metric": "a", "bound": 0}
    )
    assert row["verdict"] == claims.NOT_REPRODUCED
    assert row["reason"].startswith("failed: a = 2")


def test_a_claim_names_each_device_of_its_rows_once():
    """A summary's row names its runs' devices ("cpu, cuda:0"); beside a row of one of them,
    each device is named once."""
    rows = pd.DataFrame([metric("a", 2.0, "", "cpu, cuda:0"), metric("b", 1.0, "", "cuda:0")])
    claim = {"id": "x", "evidence": "m.csv"}
    claim["checks"] = [{"kind": "above", "metric": "a", "bound": 1}]
    claim["checks"] += [{"kind": "above", "metric": "b", "bound": 0}]
    assert claims.evaluate_claim(claim, *measured_on(rows, CPU_ONLY))["device"] == "cpu, cuda:0"


def test_unmeasured_metric_is_not_applicable_with_its_reason():
    row = verdict({"kind": "below", "metric": "gpu_time", "bound": 1})
    assert row["verdict"] == claims.NOT_APPLICABLE
    assert row["reason"] == "no CUDA device"


def test_missing_devices_are_not_applicable():
    row = verdict({"kind": "above", "metric": "a", "bound": 0}, requires={"cuda_devices": 2})
    assert row["verdict"] == claims.NOT_APPLICABLE
    assert row["reason"] == "needs 2 GPUs, the job that measured it could use none"
    assert (
        verdict(
            {"kind": "above", "metric": "a", "bound": 0},
            requires={"cuda_devices": 2},
            env={"cuda_devices": 2},
        )["verdict"]
        == claims.REPRODUCED
    )


@pytest.mark.parametrize(
    "first_job_gpus, second_job_gpus, expected",
    [(1, 2, claims.REPRODUCED), (1, 1, claims.NOT_APPLICABLE), (0, 0, claims.OBSERVED)],
)
def test_a_speed_up_needs_2_gpus_in_the_job_that_ran_on_2_not_in_the_1_device_job(
    first_job_gpus, second_job_gpus, expected
):
    """A speed-up reads the 1-device run's job, which locked one GPU, beside the 2-device
    run's: on a machine with 2 GPUs it is judged; on one GPU it is not applicable, and on CPU
    cores it is an observation of this machine."""
    claim = shipped_claims()["mgpuc.2gpu"]
    rows = pd.DataFrame(
        [metric("resnet18.speedup", 1.6, "x"), metric("resnet18.speedup_iqr", 0.02, "x")]
    ).assign(machine="one two")
    records = {
        name: {"usable_cores": 16, "cuda_devices": gpus, "host": "h"}
        for name, gpus in (("one", first_job_gpus), ("two", second_job_gpus))
    }
    row = claims.evaluate_claim(claim, rows, records)
    assert row["verdict"] == expected, row["reason"]
    assert expected != claims.NOT_APPLICABLE or row["reason"].startswith("needs 2 devices")


def test_a_claim_needing_more_cores_than_the_run_may_use_is_not_applicable():
    check = {"kind": "above", "metric": "a", "bound": 0}
    row = verdict(check, requires={"cores": 2}, env={"cuda_devices": 0, "usable_cores": 1})
    assert row["verdict"] == claims.NOT_APPLICABLE
    assert row["reason"] == "needs 2 CPU cores, the job that measured it could use 1"
    two = {"cuda_devices": 0, "usable_cores": 2}
    assert verdict(check, requires={"cores": 2}, env=two)["verdict"] == claims.REPRODUCED


def test_unknown_metric_is_an_error_not_a_verdict():
    with pytest.raises(KeyError, match="no metric"):
        verdict({"kind": "above", "metric": "nope", "bound": 0})


def test_shipped_ledger_is_valid_and_points_at_results():
    ledger = claims.load()
    assert [s["id"] for s in ledger["sections"]][:2] == ["data", "intro"]
    assert all(
        f.startswith("results/")
        for f in claims.evidence_files(ledger) + claims.figure_files(ledger)
    )


# A ledger's sources table and the start of a section citing it: a ledger test adds the rest.
SOURCES = (
    "chapters: {c: {title: A chapter, covers: §1, leaves_out: []}}\n"
    "sources:\n  notes: {label: the notes, title: t, kind: notes, about: a, path: p}\n"
)
SECTION = (
    SOURCES + "sections:\n- id: s\n  title: t\n  chapter: c\n  sources: [{id: notes, at: '§1'}]\n"
)
FIGURE_SECTION = SECTION + "  claims: []\n  figures:\n"


def test_a_figure_is_named_within_its_section_and_its_file_derived(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_text(FIGURE_SECTION + "  - {name: gd_eta0.4, caption: c}\n")
    assert claims.figure_files(claims.load(path)) == ["results/figures/s/gd_eta0.4.png"]


@pytest.mark.parametrize(
    "figure", ["{file: results/figures/s/a.png, caption: c}", "{name: s/a, caption: c}"]
)
def test_a_figure_written_as_a_path_is_rejected(tmp_path, figure):
    path = tmp_path / "claims.yaml"
    path.write_text(FIGURE_SECTION + f"  - {figure}\n")
    with pytest.raises(jsonschema.ValidationError):
        claims.load(path)


def test_ledger_schema_rejects_unknown_check(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_text(
        SECTION + "  claims:\n"
        "  - {id: s.c, kind: output, claimed_by: notes, statement: s, printed: b,\n"
        "     evidence: e.csv, checks: [{kind: roughly, metric: a}]}\n"
    )
    with pytest.raises(jsonschema.ValidationError):
        claims.load(path)


@pytest.mark.parametrize("kind", [None, "estimate"])
def test_every_claim_says_whether_it_is_an_output_or_a_measurement(tmp_path, kind):
    path = tmp_path / "claims.yaml"
    said = f"kind: {kind}, " if kind else ""
    path.write_text(
        SECTION + "  claims:\n"
        f"  - {{id: s.c, {said}claimed_by: notes, statement: s, printed: b, evidence: e.csv,\n"
        "     checks: [{kind: above, metric: a, bound: 0}]}\n"
    )
    with pytest.raises(jsonschema.ValidationError):
        claims.load(path)


def claim_printing(printed: str, gloss: str = "") -> str:
    """A one-claim ledger whose claim printed ``printed`` (glossed by ``gloss``)."""
    glossed = f", printed_en: '{gloss}'" if gloss else ""
    return (
        SECTION + "  claims:\n"
        f"  - {{id: s.c, kind: output, premise: none, claimed_by: notes, headline: h,\n"
        "     statement: s,\n"
        f"     printed: '{printed}'{glossed},\n"
        "     evidence: e.csv, checks: [{kind: above, metric: a, bound: 0}]}\n"
    )


def test_a_section_citing_a_source_not_in_the_table_is_rejected(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_text(claim_printing("0.5"))
    assert claims.load(path)["sections"][0]["sources"] == [{"id": "notes", "at": "§1"}]
    path.write_text(claim_printing("0.5").replace("{id: notes,", "{id: seed_000,"))
    with pytest.raises(ValueError, match="seed_000"):
        claims.load(path)


@pytest.mark.parametrize(
    "source",
    [
        "{label: l, title: t, kind: notes, about: a}",  # neither a url nor a path
        "{label: l, title: t, kind: blog, about: a, path: p}",  # not a kind of source
        "{title: t, kind: notes, about: a, path: p}",  # no label for the texts to use
    ],
)
def test_a_source_says_what_it_is_and_where_it_is(tmp_path, source):
    path = tmp_path / "claims.yaml"
    path.write_text(
        claim_printing("0.5").replace(
            "{label: the notes, title: t, kind: notes, about: a, path: p}", source
        )
    )
    with pytest.raises(jsonschema.ValidationError):
        claims.load(path)


@pytest.mark.parametrize("printed", ["比线性慢一些", "x，y", "lr＝0.1"])
def test_a_chinese_quotation_needs_an_english_gloss(tmp_path, printed):
    path = tmp_path / "claims.yaml"
    path.write_text(claim_printing(printed))
    with pytest.raises(jsonschema.ValidationError, match="printed_en"):
        claims.load(path)
    path.write_text(claim_printing(printed, gloss="a gloss"))
    assert claims.load(path)["sections"][0]["claims"][0]["printed_en"] == "a gloss"
    path.write_text(claim_printing("0.5 × 2 … 1.0 → η/√(sₜ + ε)"))  # no Chinese: no gloss
    claims.load(path)


def test_every_chinese_quotation_of_the_shipped_ledger_has_a_gloss():
    """Told apart from the schema's pattern: any wide (East Asian) character."""
    quoted = [
        c
        for s in claims.load()["sections"]
        for c in s["claims"]
        if any(unicodedata.east_asian_width(ch) in "WF" for ch in c["printed"])
    ]
    assert len(quoted) >= 7
    for claim in quoted:
        gloss = claim.get("printed_en", "")
        assert gloss and not any(unicodedata.east_asian_width(ch) in "WF" for ch in gloss)


def test_the_ledger_names_its_sources_by_label_not_by_file_number():
    """Texts say "the study notes §6.2.2", never "seed 000": a file number means nothing to a
    reader. Every source of the table is cited, and a section whose texts name a source by
    its label cites it."""
    ledger = claims.load()
    cited = {ref["id"] for s in ledger["sections"] for ref in s["sources"]}
    assert cited == set(ledger["sources"])
    for section in ledger["sections"]:
        texts = [section.get("summary", ""), *section.get("differences", [])]
        texts += [f["caption"] for f in section.get("figures", [])]
        texts += [c[k] for c in section["claims"] for k in ("statement", "printed")]
        text = " ".join(texts)
        assert not re.search(r"\bseeds? 0\d\d", text, re.I), section["id"]
        named = {i for i, s in ledger["sources"].items() if s["label"].lower() in text.lower()}
        assert named <= {ref["id"] for ref in section["sources"]}, section["id"]


def titles(n: int) -> dict:
    return {"sections": [{"id": f"s{i}", "title": f"Part {i}"} for i in range(n)]}


@pytest.mark.parametrize("n", [1, 9, 12, 120])
def test_report_categories_sort_in_the_books_order(n):
    """`snakemake --report` sorts its categories as text: "10." must not come before "2."."""
    categories = list(claims.section_categories(titles(n)).values())
    assert sorted(categories) == categories
    assert sorted(["0. Claims", *categories])[0] == "0. Claims"
    assert categories[0].startswith("01. " if n < 100 else "001. ")


def test_the_shipped_ledger_s_categories_sort_in_its_order():
    categories = claims.section_categories(claims.load())
    assert list(categories) == [s["id"] for s in claims.load()["sections"]]
    assert sorted(categories.values()) == list(categories.values())
    assert categories["async"] == "10. Asynchronous computation"


def test_evaluate_writes_every_column(tmp_path):
    ledger = {
        "sections": [
            {
                "id": "s",
                "title": "t",
                "source": "x",
                "claims": [
                    {
                        "id": "s.c",
                        "kind": "measurement",
                        "statement": "s",
                        "printed": "b",
                        "evidence": "m.csv",
                        "checks": [{"kind": "above", "metric": "a", "bound": 1}],
                    }
                ],
            }
        ]
    }
    frame, records = measured_on(METRICS, CPU_ONLY)
    table = claims.evaluate(ledger, lambda path: frame, lambda path: records)
    assert list(table.columns) == claims.COLUMNS
    assert table.loc[0, "verdict"] == claims.REPRODUCED and table.loc[0, "device"] == "cpu"
    assert table.loc[0, "kind"] == "measurement"
    # The measured column shows the number the check read from the evidence and its bound.
    assert table.loc[0, "measured"] == "a = 2 (needs > 1)"
    row = table.loc[0, ["id", "section", "statement", "printed", "reason", "evidence"]]
    assert list(row) == ["s.c", "s", "s", "b", "", "m.csv"]


def evaluate_with(rows, *checks, **kwargs):
    claim = {"id": "x.y", "statement": "s", "printed": "b", "evidence": "m.csv", "checks": checks}
    claim.update(kwargs.pop("claim", {}))
    return claims.evaluate_claim(claim, *measured_on(rows, CPU_ONLY), **kwargs)


def test_a_diverged_or_failed_run_is_not_reproduced_with_its_reason():
    rows = [metric("a", 1.0), failed("acc", "lenet.1 diverged at epoch 3")]
    row = evaluate_with(rows, {"kind": "above", "metric": "acc", "bound": 0.5})
    assert row["verdict"] == claims.NOT_REPRODUCED
    assert row["reason"] == "the run failed: lenet.1 diverged at epoch 3"


@pytest.mark.parametrize("broken", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    "check",
    [
        {"kind": "above", "metric": "acc", "bound": 0.5},
        {"kind": "below", "metric": "acc", "bound": 0.5},
        {"kind": "ratio_above", "numerator": "acc", "denominator": "b", "bound": 1},
        {"kind": "ratio_below", "numerator": "b", "denominator": "acc", "bound": 1},
        {"kind": "sum_of_parts", "whole": "b", "parts": ["acc", "b"]},
        {"kind": "ordering", "metrics": ["b", "acc"], "order": "increasing"},
    ],
)
def test_a_number_that_is_not_finite_is_never_reproduced(broken, check):
    """NaN without a note, or ±inf from a broken measurement, passes no check: not even one
    that ±inf would satisfy (inf > 0.5, -inf < 0.5)."""
    rows = [metric("acc", broken), metric("b", 1.0)]
    row = evaluate_with(rows, check)
    assert row["verdict"] == claims.NOT_REPRODUCED
    assert row["reason"] == f"no number was measured: acc = {broken}"


# Every check kind, with its metric "v" in the place a broken number would pass through.
EVERY_KIND = [
    {"kind": "above", "metric": "v", "bound": -1},
    {"kind": "below", "metric": "v", "bound": 1.2},
    {"kind": "within", "metric": "v", "target": 0, "tol": 1},
    {"kind": "exact", "metric": "v", "expected": 0, "decimals": 0},
    {"kind": "ratio_above", "numerator": "b", "denominator": "v", "bound": 0.5},
    {"kind": "ratio_below", "numerator": "v", "denominator": "b", "bound": 1},
    {"kind": "sum_of_parts", "whole": "b", "parts": ["v", "b"], "bound": 0.5},
    {"kind": "ordering", "metrics": ["v", "b"], "order": "increasing"},
]


# How each unit follows a number: "2 s", "2x".
SHOWN = {"s": " s", "µs": " µs", "B": " B", "GB/s": " GB/s", "samples/s": " samples/s", "x": "x"}


@pytest.mark.parametrize("check", EVERY_KIND, ids=lambda c: c["kind"])
@pytest.mark.parametrize("unit", list(SHOWN))
@pytest.mark.parametrize("value", [0.0, -5.0])
def test_a_time_size_bandwidth_throughput_or_speedup_of_zero_or_below_is_no_number(
    check, unit, value
):
    """A latency of 0 or -5 µs, a speed-up of 0 or -1: each check kind would let one through
    (0 < 1.2, 0 within 1 of 0, b / 0 unbounded ...); none is a measurement."""
    rows = [metric("v", value, unit), metric("b", 1.0, unit)]
    row = evaluate_with(rows, check)
    assert row["verdict"] == claims.NOT_REPRODUCED
    assert row["reason"].startswith(f"no number was measured: v = {value:g}{SHOWN[unit]} (a ")
    assert "is positive)" in row["reason"]


@pytest.mark.parametrize("check", EVERY_KIND, ids=lambda c: c["kind"])
def test_a_pure_number_of_zero_or_below_is_judged(check):
    """An accuracy, a loss difference or a slope has no domain to leave: 0 is a number."""
    rows = [metric("v", 0.0), metric("b", 1.0)]
    assert "no number" not in evaluate_with(rows, check)["reason"]


def test_a_spread_of_zero_is_a_spread_not_a_broken_time():
    rows = [metric("a", 2.0, "s"), metric("a_iqr", 0.0, "s")]
    check = {"kind": "above", "metric": "a", "bound": 1, "spread": {"a": "a_iqr"}}
    assert evaluate_with(rows, check)["verdict"] == claims.REPRODUCED


@pytest.mark.parametrize("broken", [math.nan, math.inf, 0.0])
def test_no_number_under_a_scaled_preset_is_not_reproduced_with_the_scale_named(broken):
    """A scaled run that times nothing is a finding, as a scaled run that crashes is."""
    row = evaluate_with(
        [metric("t", broken, "s")],
        {"kind": "below", "metric": "t", "bound": 1},
        claim={"depends_on": ["lr_schedules"]},
        deviations=SCALED,
        preset="cpu",
    )
    assert row["verdict"] == claims.NOT_REPRODUCED
    assert row["reason"].startswith("no number was measured: t = ")
    assert "(this run was scaled: " in row["reason"]
    assert "preset cpu scaled lr_schedules.train_subset" in row["reason"]


def test_a_metric_the_preset_left_out_is_not_applicable_naming_it():
    """A preset that changes a setting the claim depends on may leave out what measures it
    (lr_schedules.semantics without intended); the same gap under the book's settings is an
    error (test_unknown_metric_is_an_error_not_a_verdict)."""
    left_out = [("lr_schedules.semantics", ["as_written", "intended"], ["as_written"])]
    check = {"kind": "ordering", "metrics": ["acc", "intended.acc"], "order": "increasing"}
    row = evaluate_with(
        [metric("acc", 0.4)],
        check,
        claim={"depends_on": ["lr_schedules.semantics"]},
        deviations=left_out,
        preset="smoke",
    )
    assert row["verdict"] == claims.NOT_APPLICABLE
    assert "preset smoke scaled lr_schedules.semantics = ['as_written']" in row["reason"]
    assert row["reason"].endswith("; this run measures no intended.acc")
    assert row["measured"] == "acc = 0.4"
    # Not where the claim does not depend on what was left out, nor for a metric that names
    # nothing left out (a typo), however much else the preset scaled.
    scaled = left_out + [("lr_schedules.epochs", 30, 6)]
    typo = {**check, "metrics": ["acc", "intendd.acc"]}
    for depends_on, judged in (["lr_schedules.epochs"], check), (["lr_schedules"], typo):
        with pytest.raises(KeyError, match="no metric"):
            evaluate_with(
                [metric("acc", 0.4)],
                judged,
                claim={"depends_on": depends_on},
                deviations=scaled,
                preset="smoke",
            )


def test_a_negative_iqr_stops_the_rule_naming_the_file_and_the_metric():
    rows = [metric("a", 2.0, "s"), metric("a_iqr", -0.1, "s")]
    check = {"kind": "above", "metric": "a", "bound": 1, "spread": {"a": "a_iqr"}}
    with pytest.raises(ValueError, match=r"m\.csv: metric a_iqr, an IQR, is negative"):
        evaluate_with(rows, check)


def test_an_unknown_status_or_unit_stops_the_rule_naming_the_file_and_the_metric():
    check = {"kind": "above", "metric": "a", "bound": 1}
    with pytest.raises(ValueError, match=r"m\.csv: metric a has an unknown status 'skipped'"):
        evaluate_with([metric("a", 2.0) | {"status": "skipped"}], check)
    with pytest.raises(ValueError, match=r"m\.csv: metric a has an unknown unit 'sec'"):
        evaluate_with([metric("a", 2.0) | {"unit": "sec"}], check)


@pytest.mark.parametrize("denominator", [0.0, -0.5])
@pytest.mark.parametrize("kind", ["ratio_above", "ratio_below"])
def test_a_ratio_over_zero_or_a_negative_number_is_not_reproduced(kind, denominator):
    rows = [metric("a", 2.0), metric("b", denominator)]
    row = evaluate_with(rows, {"kind": kind, "numerator": "a", "denominator": "b", "bound": 1})
    assert row["verdict"] == claims.NOT_REPRODUCED
    assert "denominator is not positive" in row["reason"]
    assert f"a / b = 2 / {denominator:g}" in row["measured"]


def test_a_whole_of_zero_is_not_reproduced():
    rows = [metric("w", 0.0), metric("p", 1.0), metric("q", 1.0)]
    row = evaluate_with(rows, {"kind": "sum_of_parts", "whole": "w", "parts": ["p", "q"]})
    assert row["verdict"] == claims.NOT_REPRODUCED and "whole is not positive" in row["reason"]


def test_a_ratio_whose_spread_reaches_zero_is_within_the_noise():
    rows = [metric("a", 0.5), metric("b", 1.0), metric("b_iqr", 2.5)]
    check = {"kind": "ratio_below", "numerator": "a", "denominator": "b", "bound": 1}
    assert evaluate_with(rows, check)["verdict"] == claims.REPRODUCED
    row = evaluate_with(rows, check | {"spread": {"b": "b_iqr"}})
    assert row["verdict"] == claims.INCONCLUSIVE and checks.WITHIN_NOISE in row["reason"]
    assert "a / b = 0.5 / 1 = 0.5x, spread 0.222x to no bound (needs < 1x)" in row["measured"]


@pytest.mark.parametrize("bound, passes", [(1.5, True), (1.9, False)])
def test_sum_of_parts_with_a_bound_needs_that_saving(bound, passes):
    """Both chains together in 1.0 s against 0.95 + 0.9 s alone: a saving of 1.85x."""
    rows = [metric("both", 1.0, "s"), metric("a", 0.95, "s"), metric("b", 0.9, "s")]
    check = {"kind": "sum_of_parts", "whole": "both", "parts": ["a", "b"], "bound": bound}
    row = evaluate_with(rows, check)
    assert row["verdict"] == (claims.REPRODUCED if passes else claims.NOT_REPRODUCED)
    assert row["measured"] == (
        "both = 1 s, sum of parts 0.95 s + 0.9 s = 1.85 s,"
        f" sum / whole = 1.85x (needs sum / whole > {bound:g}x)"
    )


def test_what_this_machine_cannot_measure_is_not_applicable():
    rows = [not_applicable("gpu", "needs CUDA, this machine has none")]
    row = evaluate_with(rows, {"kind": "above", "metric": "gpu", "bound": 0.5})
    assert row["verdict"] == claims.NOT_APPLICABLE and row["reason"].startswith("needs CUDA")
    assert row["measured"] == ""  # no "gpu = nan (needs > 0.5)": nothing was measured


SCALED = [("lr_schedules.train_subset", None, 10000), ("lr_schedules.epochs", 30, 10)]


def test_a_scaled_setting_makes_the_claim_not_applicable_and_keeps_the_numbers():
    check = {"kind": "above", "metric": "acc", "bound": 0.5}
    row = evaluate_with(
        [metric("acc", 0.4)],
        check,
        claim={"depends_on": ["lr_schedules"]},
        deviations=SCALED,
        preset="cpu",
    )
    assert row["verdict"] == claims.NOT_APPLICABLE
    assert "preset cpu scaled lr_schedules.train_subset = 10000 (book: all)" in row["reason"]
    assert "18x this run's work" in row["reason"]  # 60000/10000 data x 30/10 epochs
    assert row["measured"] == "acc = 0.4 (needs > 0.5)"
    # A setting the claim does not depend on changes nothing.
    unrelated = evaluate_with(
        [metric("acc", 0.4)],
        check,
        claim={"depends_on": ["data_parallel.runs.lenet.1"]},
        deviations=SCALED,
        preset="cpu",
    )
    assert unrelated["verdict"] == claims.NOT_REPRODUCED


def history(path, seconds, examples=10_000):
    """A run's history: one row per epoch, taking ``seconds``."""
    rows = pd.DataFrame({"epoch": range(1, len(seconds) + 1), "seconds": seconds})
    rows.assign(samples_per_s=examples / rows["seconds"]).to_csv(path, index=False)
    return str(path)


def test_a_scaled_claim_says_how_long_training_at_the_book_s_scale_would_take_here(tmp_path):
    """From the rate the runs' histories measured after their first epochs (10,000 examples in
    1 s): the first epochs' 5 s of set-up count for nothing."""
    runs = [history(tmp_path / f"{n}.csv", [5.0] + [1.0] * 9) for n in "ab"]
    row = evaluate_with(
        [metric("acc", 0.9)],
        {"kind": "above", "metric": "acc", "bound": 0.5},
        claim={"depends_on": ["lr_schedules"]},
        deviations=SCALED,
        preset="cpu",
        rates=scaling.rates({"lr_schedules": runs}),
    )
    # 2 runs x 10 epochs x 10,000 examples, x 60,000 / 10,000 examples x 30 / 10 epochs, at
    # 10,000 examples/s: 360 s
    assert "training at the book's settings would take about 6 min here" in row["reason"]
    assert "(lr_schedules: 10,000 examples/s, each job sharing" in row["reason"]


def test_the_times_of_separate_runs_add_up_and_lists_scale_by_their_length():
    deviations = [
        ("data_parallel.runs.a.epochs", 10, 1),
        ("data_parallel.runs.b.epochs", 10, 1),
        ("data_parallel.seeds", [0, 1, 2], [0]),
    ]
    # each run trained 1,000 examples at 0.06 s an example
    rates = dict.fromkeys(["data_parallel.runs.a", "data_parallel.runs.b"], scaling.Rate(1e3, 0.06))
    row = evaluate_with(
        [metric("acc", 0.9)],
        {"kind": "above", "metric": "acc", "bound": 0.5},
        claim={
            "depends_on": ["data_parallel.runs.a", "data_parallel.runs.b", "data_parallel.seeds"]
        },
        deviations=deviations,
        preset="cpu",
        rates=rates,
    )
    # each run 10 epochs x 3 seeds = 30 x 60 s; the two runs add: 60 min, not 300 x 120 s
    assert "would take about 60 min here" in row["reason"]


def test_a_scaled_run_that_diverged_is_not_reproduced_and_says_it_was_scaled():
    row = evaluate_with(
        [failed("acc", "diverged at epoch 2")],
        {"kind": "above", "metric": "acc", "bound": 0.5},
        claim={"depends_on": ["lr_schedules.epochs"]},
        deviations=SCALED,
        preset="cpu",
    )
    assert row["verdict"] == claims.NOT_REPRODUCED
    assert row["reason"].startswith("the run failed: diverged at epoch 2 (this run was scaled: ")
    assert "preset cpu scaled lr_schedules.epochs = 10 (book: 30)" in row["reason"]


@pytest.mark.parametrize(
    "check",
    [
        {"kind": "ratio_above", "numerator": "slow", "denominator": "fast", "bound": 1},
        {"kind": "sum_of_parts", "whole": "fast", "parts": ["slow", "zero"]},
        {"kind": "ordering", "metrics": ["fast", "slow"], "order": "increasing"},
        {"kind": "below", "metric": "fast", "bound": 1.05},
    ],
)
def test_a_difference_within_the_spread_is_inconclusive(check):
    rows = [
        metric("fast", 1.0),
        metric("slow", 1.1),
        metric("zero", 0.0),
        metric("fast_iqr", 0.2),
        metric("slow_iqr", 0.2),
        metric("zero_iqr", 0.0),
    ]
    names = ("fast", "slow", "zero")
    noisy = check | {"spread": {m: f"{m}_iqr" for m in names if m in str(check)}}
    assert evaluate_with(rows, check)["verdict"] == claims.REPRODUCED
    row = evaluate_with(rows, noisy)
    assert row["verdict"] == claims.INCONCLUSIVE
    assert checks.WITHIN_NOISE in row["reason"]
    quiet = [r | {"value": 0.01} if r["metric"].endswith("_iqr") else r for r in rows]
    assert evaluate_with(quiet, noisy)["verdict"] == claims.REPRODUCED


def test_a_failed_check_carries_the_measurements_notes():
    rows = [metric("a", 1.0, note="the allocator reuses blocks"), metric("b", 1.0)]
    row = evaluate_with(
        rows, {"kind": "ratio_above", "numerator": "a", "denominator": "b", "bound": 1}
    )
    assert row["verdict"] == claims.NOT_REPRODUCED
    assert row["reason"].endswith("; note: the allocator reuses blocks")


def timings(prefix, **medians_and_iqrs):
    """Metric rows of parameter-server timings: {strategy: (median, IQR)}."""
    return [
        metric(f"{prefix}.{name}.{stat}_s", value)
        for name, pair in medians_and_iqrs.items()
        for stat, value in zip(("median", "iqr"), pair)
    ]


# A warm-up sweep whose 6 informative pairs could reach p < 0.05.
SIGN_P = "warmup_sweep.sign_p"
WARMUP_REACH = [metric("warmup_sweep.least_p", 1 / 64, "p")]


def shipped_claim(claim_id):
    return next(c for s in claims.load()["sections"] for c in s["claims"] if c["id"] == claim_id)


@pytest.mark.parametrize(
    "claim_id, supports, contradicts",
    [
        (
            "lrs.warmup_high_lr",
            [*WARMUP_REACH, metric("warmup_sweep.none.failed_runs", 6), metric(SIGN_P, 1 / 64)],
            [*WARMUP_REACH, metric("warmup_sweep.none.failed_runs", 6), metric(SIGN_P, 0.5)],
        ),
        (
            "lrs.warmup_high_lr",  # no lr of the sweep was high enough to fail without warm-up
            [*WARMUP_REACH, metric("warmup_sweep.none.failed_runs", 1), metric(SIGN_P, 0.03)],
            [*WARMUP_REACH, metric("warmup_sweep.none.failed_runs", 0), metric(SIGN_P, 1.0)],
        ),
        (
            "ps.sync160.all",  # 4 GPUs: the book's 60 against 4 x 15 ms, and gather no slower
            timings("ps.all", gather=(0.060, 0.002), ring_x_n=(0.060, 0.004)),
            timings("ps.all", gather=(0.016, 0.002), ring_x_n=(0.060, 0.004)),
        ),
        (
            "ps.sync160.all",  # 4 GPUs, gather only twice the ring: short of the book's 4
            timings("ps.all", gather=(0.060, 0.002), ring_x_n=(0.072, 0.004)),
            timings("ps.all", gather=(0.030, 0.002), ring_x_n=(0.060, 0.004)),
        ),
        (
            "ps.scale.all",  # 4 servers: each a quarter of the time, or all of it
            timings("ps.all", **{"push.n1": (0.040, 0.001), "push.split_x_n": (0.044, 0.002)}),
            timings("ps.all", **{"push.n1": (0.040, 0.001), "push.split_x_n": (0.160, 0.002)}),
        ),
        (
            "ps.scale",
            timings("ps", **{"push.n1": (0.040, 0.001), "push.split_x_n": (0.042, 0.002)}),
            timings("ps", **{"push.n1": (0.040, 0.001), "push.split_x_n": (0.080, 0.002)}),
        ),
    ],
)
def test_new_claims_follow_their_evidence(claim_id, supports, contradicts):
    claim = shipped_claim(claim_id)
    machine = {"cuda_devices": 8, "usable_cores": 8}  # everything a claim may require
    held = claims.evaluate_claim(claim, *measured_on(supports, machine))
    refuted = claims.evaluate_claim(claim, *measured_on(contradicts, machine))
    assert held["verdict"] == claims.REPRODUCED
    assert refuted["verdict"] == claims.NOT_REPRODUCED


def test_a_source_s_copy_is_where_its_path_says():
    """Paths are relative to the directory that holds the checkout (beside it: shared/)."""
    copies = {i: s["path"] for i, s in claims.load()["sources"].items() if "path" in s}
    if not (REPO.parent / "shared").is_dir():
        pytest.skip(f"no shared directory beside {REPO}")
    assert copies and all((REPO.parent / p).is_file() for p in copies.values())


def test_a_spread_that_straddles_the_bound_is_inconclusive_and_shows_both_ends():
    """A final accuracy of 0.8094 against a needed 0.815: with a spread of 0.02 the bound lies
    between its ends, and the claim is inconclusive, not counted as not reproduced (it was
    "not reproduced", showing only the end "0.8094 − IQR/2 = 0.7994"); with one of 0.0091 both
    ends lie below it. Both ends are shown, so a reader sees where the bound lies."""
    check = {"kind": "above", "metric": "acc", "bound": 0.815, "spread": {"acc": "acc_iqr"}}
    row = evaluate_with([metric("acc", 0.8094), metric("acc_iqr", 0.02)], check)
    assert row["verdict"] == claims.INCONCLUSIVE
    assert row["measured"] == (
        f"acc = 0.8094, spread 0.7994 to 0.8194 (needs > 0.815), {checks.WITHIN_NOISE}"
    )
    row = evaluate_with([metric("acc", 0.8094), metric("acc_iqr", 0.0091)], check)
    assert row["verdict"] == claims.NOT_REPRODUCED
    assert row["measured"] == "acc = 0.8094, spread 0.80485 to 0.81395 (needs > 0.815)"
    rows = [metric("r", 3.26, "x"), metric("r_iqr", 0.6, "x")]
    check = {"kind": "below", "metric": "r", "bound": 3.5, "spread": {"r": "r_iqr"}}
    row = evaluate_with(rows, check)
    assert row["verdict"] == claims.INCONCLUSIVE
    assert row["measured"].startswith("r = 3.26x, spread 2.96x to 3.56x (needs < 3.5x)")
    clear = evaluate_with(rows, check | {"bound": 3.6})
    assert clear["verdict"] == claims.REPRODUCED
    assert clear["measured"] == "r = 3.26x, spread 2.96x to 3.56x (needs < 3.6x)"


@pytest.mark.parametrize("timed, verdict", [(True, "na"), (False, "judged")])
def test_a_timed_claim_timed_beside_other_jobs_is_not_judged(timed, verdict):
    """A job that times and shared the machine (timings_alone: false) judges no timed claim;
    a claim on its other numbers (an accuracy, a printed output) is still judged."""
    timings = [metric("t", 1.0, "s"), metric("t_iqr", 0.1, "s")]
    rows, records = measured_on(timings, {"ran_alone": False})
    claim = {"id": "x.y", "kind": "measurement", "timed": timed, "evidence": "m.csv"}
    claim["checks"] = [{"kind": "below", "metric": "t", "bound": 2, "spread": {"t": "t_iqr"}}]
    row = claims.evaluate_claim(claim, rows, records)
    if verdict == "na":
        assert row["verdict"] == claims.NOT_APPLICABLE
        assert row["reason"] == claims.RAN_BESIDE_OTHERS
        assert row["measured"] == "t = 1 s, spread 0.95 s to 1.05 s (needs < 2 s)"  # not judged
    else:
        assert row["verdict"] == claims.REPRODUCED
    alone = claims.evaluate_claim(claim, *measured_on(rows, {"ran_alone": True}))
    assert alone["verdict"] == claims.REPRODUCED


def test_a_claim_fails_within_its_noise_only_where_every_failed_check_did():
    """A check that fails outright makes the claim a plain failure, whatever its other
    checks' noise."""
    rows = [metric("r", 3.1), metric("r_iqr", 0.6), metric("q", 1.5)]
    noisy = {"kind": "above", "metric": "r", "bound": 3, "spread": {"r": "r_iqr"}}
    clear = {"kind": "above", "metric": "q", "bound": 2}
    alone = evaluate_with(rows, noisy)
    assert alone["verdict"] == claims.INCONCLUSIVE
    assert alone["reason"] == alone["measured"]  # the check says it sat within its noise
    mixed = evaluate_with(rows, noisy, clear)
    assert mixed["verdict"] == claims.NOT_REPRODUCED
    assert mixed["reason"].startswith(claims.FAILED_CHECK)
    assert checks.WITHIN_NOISE in mixed["reason"]  # each check says how it failed


# What the job of a 2-device run wrote on a machine with one GPU and 16 cores: its devices are
# GPUs, so it could not run (devices.unavailable(2) there).
ONE_GPU = {"cuda_devices": 1, "usable_cores": 16, "host": "vm"}
LACKS_A_GPU = shortfall.reason(2, have_cuda=1, cores=16)


def cpu_preset_deviations(preset="cpu", left_out=()) -> list[tuple]:
    """The deviations of the shipped ``preset``, with the data-parallel runs ``left_out``."""
    import yaml

    config = yaml.safe_load((REPO / "config.yaml").read_text()) | {"preset": preset}
    runs = config["presets"][preset]["data_parallel"]["runs"]
    runs.update(dict.fromkeys(left_out))
    return [(d.key, d.book, d.value) for d in settings.resolve(config).deviations]


def test_identical_replicas_are_judged_at_any_scale_and_not_where_a_run_is_left_out():
    """mgpu.2gpu.replicas, an output of the code, depends on both 2-device runs: the cpu
    preset's scaled runs judge it, where a measurement would be judged at the book's scale
    only; a preset that leaves out the ResNet-18 run leaves it nothing to judge, and it says
    so (the claims stopped with a KeyError before)."""
    claim = shipped_claim("mgpu.2gpu.replicas")
    gaps = [metric("lenet.2.replica_gap", 0.0), metric("resnet18.2.replica_gap", 0.0)]
    scaled = cpu_preset_deviations()
    assert scaling.scaled_reason(claim["depends_on"], scaled, "cpu", {})
    row = claims.evaluate_claim(claim, *measured_on(gaps, CPU_ONLY), scaled, "cpu")
    assert row["verdict"] == claims.REPRODUCED
    drifted = [gaps[0], metric("resnet18.2.replica_gap", 1e-6)]
    row = claims.evaluate_claim(claim, *measured_on(drifted, CPU_ONLY), scaled, "cpu")
    assert row["verdict"] == claims.NOT_REPRODUCED
    went_nan = [gaps[0], metric("resnet18.2.replica_gap", math.inf)]  # a replica held a NaN
    row = claims.evaluate_claim(claim, *measured_on(went_nan, CPU_ONLY), scaled, "cpu")
    assert row["verdict"] == claims.NOT_REPRODUCED
    without = cpu_preset_deviations("smoke", left_out=["resnet18.2"])
    row = claims.evaluate_claim(claim, *measured_on(gaps[:1], CPU_ONLY), without, "smoke")
    assert row["verdict"] == claims.NOT_APPLICABLE
    assert "left out data_parallel.runs.resnet18.2" in row["reason"]


def test_an_output_is_judged_at_any_size_of_run_but_not_at_other_settings():
    """A smaller run computes the same output; another lr computes another one, which the
    claim's statement does not speak of: then every setting the preset changed is named."""
    check = {"kind": "exact", "metric": "gap", "expected": 0, "decimals": 9}
    output = {"kind": "output", "depends_on": ["data_parallel.runs.lenet.2"]}
    smaller = ("data_parallel.runs.lenet.2.batch_size", 256, 32)
    for deviations, judged in [
        ([smaller], True),
        ([smaller, ("data_parallel.runs.lenet.2.lr", 0.2, 0.5)], False),
    ]:
        row = evaluate_with(
            [metric("gap", 0.0)], check, claim=output, deviations=deviations, preset="p"
        )
        assert (row["verdict"] == claims.REPRODUCED) == judged, row["reason"]
        assert judged or "batch_size = 32" in row["reason"] and "lr = 0.5" in row["reason"]
        measurement = evaluate_with(
            [metric("gap", 0.0)],
            check,
            claim={**output, "kind": "measurement"},
            deviations=deviations,
            preset="p",
        )
        assert measurement["verdict"] == claims.NOT_APPLICABLE


@pytest.mark.parametrize(
    "claim_id",
    ["mgpuc.2gpu.curve", "mgpuc.2gpu.acc", "mgpuc.2gpu_b256.acc", "mgpuc.paddle.2gpu.lr"],
)
def test_a_claim_whose_devices_are_missing_says_so_whatever_the_preset_scaled(claim_id):
    """The first GPU run (one H200, the cpu preset): these claims read "judged at the book's
    scale only ... run with --config preset=book", where the book preset could not judge them
    either. The missing device comes first, and no preset is named as its cure."""
    claim = shipped_claim(claim_id)
    names = sorted({m for check in claim["checks"] for m in checks.metrics_of(check)})
    rows = [
        metric(m, 0.9) if ".1." in m else not_applicable(m, LACKS_A_GPU, device="") for m in names
    ]
    deviations = cpu_preset_deviations()
    assert scaling.scaled_reason(claim["depends_on"], deviations, "cpu", {})  # it was scaled
    row = claims.evaluate_claim(claim, *measured_on(rows, ONE_GPU), deviations, "cpu")
    assert row["verdict"] == claims.NOT_APPLICABLE
    assert (
        row["reason"]
        == LACKS_A_GPU
        == ("needs 2 devices, the job that measured it could use 1 (1 GPU)")
    )
    assert "preset" not in row["reason"] and scaling.SCALED_REASON not in row["reason"]


def test_a_metric_that_lacked_a_device_comes_before_the_scale_but_other_gaps_do_not():
    """Hardware before scale; a metric not measured for another reason (a short run reaches
    no epoch to judge) leaves the scale to speak, since the book's settings may measure it."""
    check = {"kind": "below", "metric": "acc", "bound": 0.5}
    scaled = {"claim": {"depends_on": ["lr_schedules"]}, "deviations": SCALED, "preset": "cpu"}
    lacking = evaluate_with([not_applicable("acc", LACKS_A_GPU)], check, **scaled)
    assert lacking["verdict"] == claims.NOT_APPLICABLE and lacking["reason"] == LACKS_A_GPU
    short = evaluate_with(
        [not_applicable("acc", "this run reaches no judged epoch")], check, **scaled
    )
    assert short["reason"].startswith(scaling.SCALED_REASON)


def test_a_crashed_run_is_a_finding_beside_a_part_that_lacked_its_device():
    """One metric's job lacked a GPU, another's run failed: the failure is what the claim
    reports, not the missing device."""
    check = {"kind": "ratio_above", "numerator": "acc", "denominator": "time", "bound": 1}
    rows = [not_applicable("acc", LACKS_A_GPU), failed("time", "worker 1 died", "s")]
    row = evaluate_with(rows, check)
    assert row["verdict"] == claims.NOT_REPRODUCED and "worker 1 died" in row["reason"]


# Each check kind with finite, in-domain numbers whose derived number is not finite: a ratio or
# a sum that overflows, an end of a spread that does.
OVERFLOWING = [
    ({"kind": "above", "metric": "h", "bound": 1, "spread": {"h": "huge_iqr"}}, {}),
    ({"kind": "below", "metric": "n", "bound": 1, "spread": {"n": "huge_iqr"}}, {}),
    ({"kind": "within", "metric": "h", "target": -1e308, "tol": 1}, {}),
    ({"kind": "ratio_above", "numerator": "h", "denominator": "tiny", "bound": 1}, {}),
    ({"kind": "ratio_below", "numerator": "h", "denominator": "tiny", "bound": 1}, {}),
    ({"kind": "sum_of_parts", "whole": "one", "parts": ["h", "h"]}, {}),
    (
        {"kind": "ordering", "metrics": ["one", "h"], "order": "increasing"},
        {"spread": {"h": "huge_iqr"}},
    ),
]


@pytest.mark.parametrize("check, extra", OVERFLOWING, ids=lambda c: c.get("kind", ""))
def test_a_derived_number_that_is_not_finite_is_not_reproduced(check, extra):
    """1e308 / 1e-308 is inf, and inf > 1: the ratio read "reproduced"."""
    rows = [
        metric("h", 1e308),
        metric("n", -1e308),
        metric("tiny", 1e-308),
        metric("one", 1.0),
        metric("huge_iqr", 1.7e308),
    ]
    row = evaluate_with(rows, check | extra)
    assert row["verdict"] == claims.NOT_REPRODUCED
    assert row["reason"].startswith("no number was measured: ")
    assert checks.WITHIN_NOISE not in row["reason"]


def renamed(check: dict, old: str, new: str) -> dict:
    """``check`` with its metric ``old`` named ``new``."""

    def name(m):
        return new if m == old else m

    return {k: [name(m) for m in v] if isinstance(v, list) else name(v) for k, v in check.items()}


@pytest.mark.parametrize("check", EVERY_KIND, ids=lambda c: c["kind"])
def test_a_time_written_without_its_unit_is_judged_as_the_time_its_name_says(check):
    """A row "v_s, -1, (no unit)" read as a pure number let -1 s pass (-1 < 1.2)."""
    rows = [metric("v_s", -1.0), metric("b", 1.0, "s")]
    row = evaluate_with(rows, renamed(check, "v", "v_s"))
    assert row["verdict"] == claims.NOT_REPRODUCED
    assert row["reason"] == "no number was measured: v_s = -1 s (a time is positive)"


def test_a_unit_other_than_the_one_a_metric_s_name_says_stops_the_rule():
    check = {"kind": "below", "metric": "t.median_s", "bound": 1}
    with pytest.raises(ValueError, match=r"m\.csv: metric t\.median_s has unit 'ms'.*'s'"):
        evaluate_with([metric("t.median_s", 0.5, "ms")], check)


@pytest.mark.parametrize("check", EVERY_KIND, ids=lambda c: c["kind"])
@pytest.mark.parametrize(
    "unit, value, domain",
    [
        ("p", -0.5, "a p-value lies between 0 and 1"),
        ("p", 1.5, "a p-value lies between 0 and 1"),
        ("|Δ|", -5.0, "a distance is at least 0"),
    ],
)
def test_a_p_value_outside_0_1_or_a_negative_distance_is_no_number(check, unit, value, domain):
    """A sign test's p of -0.5 is below any significance level, a curve's excess over the book's
    band of -5 below any tolerance: neither is a measurement."""
    rows = [metric("v", value, unit), metric("b", 0.5, unit)]
    row = evaluate_with(rows, check)
    assert row["verdict"] == claims.NOT_REPRODUCED
    assert row["reason"] == f"no number was measured: v = {value:g} ({domain})"


def test_a_p_value_and_a_distance_read_as_their_names_say():
    """Shown beside a claim that was not judged: "sign_p = 0.03", not "0.03 p"."""
    rows = [
        metric("w.sign_p", 0.03, "p"),
        metric("w.curve_excess", 0.01, "|Δ|"),
        not_applicable("w.gpu_s", LACKS_A_GPU, "s"),
    ]
    check = {
        "kind": "ordering",
        "metrics": ["w.sign_p", "w.curve_excess", "w.gpu_s"],
        "order": "increasing",
    }
    row = evaluate_with(rows, check)
    assert row["verdict"] == claims.NOT_APPLICABLE
    assert row["measured"] == "w.sign_p = 0.03; w.curve_excess = 0.01"


# A claim about GPUs: 2 devices give no speed-up, as the book measured on two GPUs.
GPU_SPEED = {
    "timed": True,
    "premise": "gpus",
    "premise_why": "on two GPUs synchronizing costs as much as computing",
    "requires": {"cuda_devices": 2},
}
SPEEDUP = [metric("speedup", 1.67, "x"), metric("speedup_iqr", 0.1, "x")]
NO_SPEEDUP = {
    "kind": "below",
    "metric": "speedup",
    "bound": 1.2,
    "spread": {"speedup": "speedup_iqr"},
}


@pytest.mark.parametrize("gpus, verdict", [(0, "observed"), (1, "na"), (2, "judged")])
def test_a_gpu_claim_measured_on_cpu_cores_is_an_observation_never_a_verdict(gpus, verdict):
    """CPU cores standing in for GPUs measure this machine: the claim is neither reproduced
    nor not reproduced, however far its number lies from the book's; one GPU cannot judge a
    2-GPU claim; two judge it."""
    claim = {"id": "x.y", "evidence": "m.csv", "checks": [NO_SPEEDUP]} | GPU_SPEED
    row = claims.evaluate_claim(claim, *measured_on(SPEEDUP, {"cuda_devices": gpus}))
    if verdict == "observed":
        assert row["verdict"] == claims.OBSERVED
        assert row["reason"].startswith(
            "the book's claim is about GPUs: on two GPUs synchronizing costs as much as"
            " computing. This run measured it on"
        )
        assert "needs 2 GPUs, the job that measured it could use none" in row["reason"]
        assert row["measured"].startswith("speedup = 1.67x")  # shown, not judged
    elif verdict == "na":
        assert row["verdict"] == claims.NOT_APPLICABLE
    else:
        assert row["verdict"] == claims.NOT_REPRODUCED
    # The same numbers of a claim that holds on any device are a finding.
    anywhere = claim | {"premise": "any"}
    assert claims.evaluate_claim(anywhere, *measured_on(SPEEDUP, {"usable_cores": 2}))[
        "verdict"
    ] == (claims.NOT_APPLICABLE)  # it still requires 2 GPUs
    del anywhere["requires"]
    assert claims.evaluate_claim(anywhere, *measured_on(SPEEDUP))["verdict"] == (
        claims.NOT_REPRODUCED
    )


def test_an_unbounded_spread_is_noise_not_a_broken_number():
    """A ratio whose denominator's spread reaches 0 has a spread up to +inf: the bound lies
    inside it, so the claim is inconclusive, not "no number was measured"."""
    claim = {"id": "x.y", "evidence": "m.csv", "checks": [NO_SPEEDUP]} | GPU_SPEED
    rows = [metric("speedup", 1.67, "x"), metric("speedup_iqr", float("inf"), "x")]
    row = claims.evaluate_claim(claim, *measured_on(rows, {"cuda_devices": 2}))
    assert row["verdict"] == claims.INCONCLUSIVE
    rows[1] = metric("speedup_iqr", float("nan"), "x")  # a spread that is none stays broken
    row = claims.evaluate_claim(claim, *measured_on(rows, {"cuda_devices": 2}))
    assert row["verdict"] == claims.NOT_REPRODUCED


def test_a_gpu_claim_timed_on_cpu_cores_beside_other_jobs_lacks_its_gpus():
    """A timing that CPU cores took beside other jobs (planned so where no claim can judge it:
    common.smk's unjudged_time) describes neither the book nor this machine: not applicable,
    for the GPUs the claim needs."""
    claim = {"id": "x.y", "evidence": "m.csv", "checks": [NO_SPEEDUP]} | GPU_SPEED
    row = claims.evaluate_claim(claim, *measured_on(SPEEDUP, {"ran_alone": False}))
    assert row["verdict"] == claims.NOT_APPLICABLE
    assert row["reason"] == (
        "needs 2 GPUs, the job that measured it could use none; timed beside other jobs, as"
        " planned where no claim can judge its time"
    )
    assert row["measured"].startswith("speedup = 1.67x")


@pytest.mark.parametrize("alone", [True, False])
def test_a_gpu_claim_whose_run_failed_on_cpu_cores_is_not_reproduced(alone):
    """Timed alone or beside other jobs: a crash, or a number that is none, is a finding."""
    claim = {"id": "x.y", "evidence": "m.csv", "checks": [NO_SPEEDUP]} | GPU_SPEED
    rows = [failed("speedup", "the 2-device run died", "x"), metric("speedup_iqr", 0.1, "x")]
    judged = claims.evaluate_claim(claim, *measured_on(rows, {"ran_alone": alone}))
    assert judged["verdict"] == claims.NOT_REPRODUCED
    assert judged["reason"].startswith("the run failed: the 2-device run died")
    rows = [metric("speedup", float("nan"), "x"), metric("speedup_iqr", 0.1, "x")]
    judged = claims.evaluate_claim(claim, *measured_on(rows, {"ran_alone": alone}))
    assert judged["verdict"] == claims.NOT_REPRODUCED
    assert judged["reason"].startswith("no number was measured: speedup")


def test_observations_are_counted_apart_in_the_findings():
    from d2lrepro.pipeline import findings

    claim = {"id": "x.y", "evidence": "m.csv", "checks": [NO_SPEEDUP]} | GPU_SPEED
    row = claims.evaluate_claim(claim, *measured_on(SPEEDUP)) | {"section": "s"}
    ledger = {
        "chapters": {"c": {"title": "Chapter", "covers": "§1", "leaves_out": []}},
        "sources": {"book": {"label": "the book", "kind": "book"}},
        "sections": [{"id": "s", "chapter": "c", "claims": [claim | {"claimed_by": "book"}]}],
    }
    (found,) = findings.findings(ledger, [row], "cpu")
    assert found["sentence"].startswith("This run judged 0 of the chapter's 1 claim.")
    assert "1 claim about GPUs was measured on other devices" in found["sentence"]
    assert "Not judged here" not in found["sentence"]
    assert not found["failures"] and [o["id"] for o in found["observed"]] == ["x.y"]


@pytest.mark.parametrize("iqr", [None, 0.0])
def test_a_timed_claim_with_no_measured_spread_is_inconclusive(iqr):
    """One seed and one timed epoch: a speed-up far from the bound, or one that meets it, is
    no verdict without the noise to weigh it against."""
    rows = [metric("speedup", 1.67, "x")]
    check = {"kind": "below", "metric": "speedup", "bound": 1.2}
    if iqr is not None:
        rows.append(metric("speedup_iqr", iqr, "x"))
        check["spread"] = {"speedup": "speedup_iqr"}
    for bound in (1.2, 2.0):
        row = evaluate_with(rows, check | {"bound": bound}, claim={"timed": True})
        assert row["verdict"] == claims.INCONCLUSIVE
        assert row["reason"].startswith(claims.NO_SPREAD + "speedup is timed without repeats")
    # Not timed (an accuracy), or timed with a spread: judged.
    assert evaluate_with(rows, check)["verdict"] == claims.NOT_REPRODUCED
    noisy = [metric("speedup", 1.67, "x"), metric("speedup_iqr", 0.1, "x")]
    assert evaluate_with(noisy, NO_SPEEDUP, claim={"timed": True})["verdict"] == (
        claims.NOT_REPRODUCED
    )


def test_a_timed_check_beyond_its_noise_is_a_finding_beside_a_check_without_one():
    rows = SPEEDUP + [metric("t", 2.0, "s")]
    row = evaluate_with(
        rows, NO_SPEEDUP, {"kind": "below", "metric": "t", "bound": 3}, claim={"timed": True}
    )
    assert row["verdict"] == claims.NOT_REPRODUCED


def test_a_test_whose_data_cannot_reach_its_threshold_is_inconclusive():
    """Warm-up rescued 1 run and broke 1: even if both had agreed, a one-sided sign test over
    2 runs gives p = 0.25 at best. The run could not tell, and says how many it needs."""
    note = "2 informative runs; a one-sided sign test needs 5 that agree for p < 0.05"
    rows = [metric("sign_p", 0.75, "p"), metric("least_p", 0.25, "p", note=note)]
    check = {"kind": "below", "metric": "sign_p", "bound": 0.05, "least": "least_p"}
    row = evaluate_with(rows, check)
    assert row["verdict"] == claims.INCONCLUSIVE
    assert row["reason"] == (
        "sign_p = 0.75 (needs p < 0.05), out of reach: least_p = 0.25 at best, with this run's"
        f" data; note: {note}"
    )
    # Data that could reach the threshold: a p that misses it is a finding.
    reachable = [metric("sign_p", 0.75, "p"), metric("least_p", 0.03125, "p")]
    assert evaluate_with(reachable, check)["verdict"] == claims.NOT_REPRODUCED
    agreed = [metric("sign_p", 0.03125, "p"), metric("least_p", 0.03125, "p")]
    assert evaluate_with(agreed, check)["verdict"] == claims.REPRODUCED


def test_a_typical_run_that_misses_where_the_nearest_run_meets_is_within_the_noise():
    """The book's single run lies 0.02 from the middle half of this run's seeds (needs 0.01),
    but 0.005 from the seed nearest it: one run of this code could be the book's. Beyond the
    bound from the nearest seed too, a finding; within it of the middle half, reproduced."""
    check = {"kind": "below", "metric": "ex", "bound": 0.01, "nearest": "ex_nearest"}

    def judged(typical, nearest):
        return evaluate_with(
            [metric("ex", typical, "|Δ|"), metric("ex_nearest", nearest, "|Δ|")], check
        )

    row = judged(0.02, 0.005)
    assert row["verdict"] == claims.INCONCLUSIVE
    assert (
        row["reason"]
        == f"ex = 0.02 (needs |Δ| < 0.01), but ex_nearest = 0.005: {checks.NEAREST_MEETS}"
    )
    assert judged(0.02, 0.011)["verdict"] == claims.NOT_REPRODUCED
    assert judged(0.009, 0.0)["verdict"] == claims.REPRODUCED


def test_every_claim_names_its_premise_and_outputs_are_the_same_everywhere(tmp_path):
    ledger = claims.load()
    every = [c for s in ledger["sections"] for c in s["claims"]]
    assert all((c["kind"] == "output") == (c["premise"] == "none") for c in every)
    gpus = [c for c in every if c["premise"] == "gpus"]
    assert all(c["requires"]["cuda_devices"] >= 1 and c["premise_why"] for c in gpus)
    path = tmp_path / "claims.yaml"
    path.write_text(claim_printing("0.5").replace("premise: none", "premise: any"))
    with pytest.raises(ValueError, match="premise none exactly where kind is output"):
        claims.load(path)
    path.write_text(claim_printing("0.5").replace("premise: none", "premise: gpus"))
    with pytest.raises(jsonschema.ValidationError):
        claims.load(path)  # a claim about GPUs says why, and requires CUDA
