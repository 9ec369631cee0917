"""Runs side by side: flipped verdicts first, claims of one run only, escaped texts."""

import math

from conftest import archived_run, two_archived_runs
from d2lrepro.core import reference
from d2lrepro.pipeline import archive, checks, claims, compare

BOOK = reference.load()


def test_a_flipped_verdict_comes_first_then_claims_of_one_run(tmp_path):
    runs = two_archived_runs(tmp_path)
    names = compare.labels(runs)
    assert names == ["box 2026-01-02", "laptop 2026-01-02"]
    rows = compare.table(runs, names).set_index("id", drop=False)
    assert rows["id"].tolist() == ["s.fast", "s.extra", "s.same"]
    assert rows["group"].tolist() == [compare.DIFFERS, compare.SOME_RUNS, compare.SAME]
    assert rows.loc["s.fast", "laptop 2026-01-02: verdict"] == claims.NOT_REPRODUCED
    assert rows.loc["s.extra", "laptop 2026-01-02: verdict"] == compare.ABSENT
    # the numbers each run's own ledger compares, and how far they lie apart
    assert rows.loc["s.fast", "box 2026-01-02: value"] == 3.0
    assert rows.loc["s.fast", "laptop 2026-01-02: value"] == 1.2
    assert math.isclose(rows.loc["s.fast", "max_over_min"], 2.5)
    assert math.isclose(rows.loc["s.fast", "max_minus_min"], 1.8)
    assert math.isnan(rows.loc["s.extra", "max_over_min"])  # one run: nothing to compare


def test_the_page_escapes_every_text_of_an_archive(tmp_path):
    runs = two_archived_runs(tmp_path)
    html, rows = compare.render(runs, BOOK, commit="abc")
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>bold</b>" not in html and "Timings &lt;b&gt;bold&lt;/b&gt;" in html
    assert html.index("s.fast") < html.index("s.extra") < html.index("s.same")
    assert compare.ABSENT in html
    assert "CPU one" in html and "CPU two" in html
    assert len(rows) == 3


def test_the_environments_say_where_the_runs_differ(tmp_path):
    runs = two_archived_runs(tmp_path)
    rows = {r["field"]: r for r in compare.environments(runs)}
    assert rows["CPU"]["differs"] and rows["CPU"]["values"] == ["CPU one", "CPU two"]
    assert rows["commit"]["differs"] and not rows["torch"]["differs"]
    assert rows["archive"]["values"] == ["one.zip", "two.zip"]


def test_runs_of_one_host_and_day_are_told_apart_by_their_files(tmp_path):
    one = archived_run(tmp_path, "a", {"s.fast": claims.REPRODUCED}, {"a": 2.0, "b": 1.0})
    two = archived_run(tmp_path, "b", {"s.fast": claims.REPRODUCED}, {"a": 2.0, "b": 1.0})
    assert compare.labels([one, two]) == ["a", "b"]
    assert compare.labels([one, one]) == ["a (1)", "a (2)"]


def test_the_number_of_each_kind_of_check():
    values = {"a": 3.0, "b": 2.0, "c": 0.0, "d": 1.0}
    assert (
        compare.headline({"kind": "ratio_below", "numerator": "a", "denominator": "b"}, values)
        == 1.5
    )
    assert math.isnan(
        compare.headline({"kind": "ratio_above", "numerator": "a", "denominator": "c"}, values)
    )
    assert (
        compare.headline({"kind": "sum_of_parts", "whole": "a", "parts": ["b", "d"]}, values) == 1
    )
    assert compare.headline({"kind": "within", "metric": "b", "target": 2, "tol": 1}, values) == 2
    typical = {"kind": "typical", "metric": "b", "low": 1, "high": 3, "editions": 3}
    assert compare.headline(typical, values) == 2  # the runs' median
    assert math.isnan(compare.headline({"kind": "ordering", "metrics": ["a", "b"]}, values))
    assert math.isnan(compare.headline({"kind": "above", "metric": "absent"}, values))


def test_a_flip_between_some_runs_outranks_a_claim_missing_from_another(tmp_path):
    third = archived_run(tmp_path, "three", {"s.same": claims.REPRODUCED}, {"c": 1.0}, host="gpu")
    runs = [*two_archived_runs(tmp_path), third]
    rows = compare.table(runs, compare.labels(runs)).set_index("id")
    assert rows.loc["s.fast", "group"] == compare.DIFFERS
    assert rows.loc["s.fast", "gpu 2026-01-02: verdict"] == compare.ABSENT
    assert rows.loc["s.extra", "group"] == compare.SOME_RUNS


def test_a_ledger_of_another_shape_gives_no_numbers_and_no_error():
    assert compare.ledger_claims({"sections": 5}) == {}
    assert compare.ledger_claims({"sections": ["x", {"claims": 3}, {"claims": [{"id": 1}]}]}) == {}
    ledger = {"sections": [{"claims": [{"id": "a", "checks": [{"kind": "above"}]}]}]}
    assert list(compare.ledger_claims(ledger)) == ["a"]


def test_a_claim_shows_its_headline_with_its_statement_behind_it(tmp_path):
    """As in the report: the headline, a click away from the statement; an archive whose
    claims have no headline shows the statement."""
    html, rows = compare.render(two_archived_runs(tmp_path), BOOK, commit="abc")
    assert rows.set_index("id").loc["s.fast", "headline"] == "A & B: A is faster"
    fast = '<details class="statement"><summary>A &amp; B: A is faster</summary>A is faster'
    assert fast in html
    assert "<div>Only in one run</div>" in html


def with_fast(run, verdict: str, reason: str):
    """``run`` with the verdict and reason of its claim s.fast replaced."""
    table = run.claims
    table.loc[table["id"] == "s.fast", ["verdict", "reason"]] = [verdict, reason]
    csv = table.to_csv(index=False).encode()
    return archive.Run(run.path, run.manifest, run.files | {archive.CLAIMS: csv})


def test_an_older_archive_s_noise_reads_as_inconclusive(tmp_path):
    """An archive written before the inconclusive verdict calls a claim whose failed checks
    all sat within their noise "not reproduced", its reason led by "failed within the measured
    noise: ". Read as inconclusive, it has the verdict a newer run gives the same numbers, in
    that verdict's colour; an older plain failure stays not reproduced."""
    old, new = two_archived_runs(tmp_path)
    check = f"a / b = 3 / 1 = 3x, spread 1.5x to 6x (needs > 2.5x), {checks.WITHIN_NOISE}"
    older = with_fast(old, claims.NOT_REPRODUCED, compare.OLD_WITHIN_NOISE + check)
    newer = with_fast(new, claims.INCONCLUSIVE, check)
    names = compare.labels([older, newer])
    rows = compare.table([older, newer], names).set_index("id")
    assert rows.loc["s.fast", f"{names[0]}: verdict"] == claims.INCONCLUSIVE
    assert rows.loc["s.fast", "group"] == compare.SAME
    html, _ = compare.render([older, newer], BOOK, commit="abc")
    assert '<span class="verdict unsure">1 inconclusive here</span>' in html
    assert ".unsure {" in html
    plain = with_fast(old, claims.NOT_REPRODUCED, "failed: a / b")
    rows = compare.table([plain, newer], names).set_index("id")
    assert rows.loc["s.fast", f"{names[0]}: verdict"] == claims.NOT_REPRODUCED
    assert rows.loc["s.fast", "group"] == compare.DIFFERS
