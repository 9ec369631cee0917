"""Runs side by side: flipped verdicts first, claims of one run only, escaped texts, figures."""

import json
import math

import pandas as pd

from d2lrepro.core import reference
from d2lrepro.pipeline import archive, claims, compare, compare_figures

BOOK = reference.load()
LEDGER = """\
sections:
  - id: s
    title: Timings <b>bold</b>
    claims:
      - {id: s.fast, kind: measurement, statement: A is faster, printed: "2x",
         evidence: results/s/metrics.csv,
         checks: [{kind: ratio_above, numerator: a, denominator: b, bound: 1.5}]}
      - {id: s.same, kind: measurement, statement: "<script>alert(1)</script>", printed: "1",
         evidence: results/s/metrics.csv, checks: [{kind: below, metric: c, bound: 5}]}
      - {id: s.extra, kind: output, statement: Only in one run, printed: "0",
         evidence: results/s/metrics.csv, checks: [{kind: exact, metric: c, expected: 1}]}
"""
ENV = {"cpu_model": "CPU one", "usable_cores": 2, "logical_cpus": 2, "torch_version": "2.13.0"}


def claim_row(claim_id, statement, verdict):
    return {
        "id": claim_id,
        "section": "s",
        "kind": "measurement",
        "statement": statement,
        "printed": "2x",
        "measured": f"measured for {claim_id}",
        "verdict": verdict,
        "reason": "" if verdict == claims.REPRODUCED else "failed: a / b",
        "device": "cpu",
        "evidence": "results/s/metrics.csv",
    }


def make_run(tmp_path, name, verdicts, metrics, host="box", env=ENV, losses=None):
    """An archive of a run whose claims have ``verdicts`` (id -> verdict), measuring
    ``metrics`` (name -> value); ``losses``: airfoil loss curves by setting."""
    root = tmp_path / name
    statements = {"s.fast": "A is faster", "s.same": "<script>alert(1)</script>"}
    table = pd.DataFrame(
        [claim_row(i, statements.get(i, "Only in one run"), v) for i, v in verdicts.items()]
    )
    files = {
        archive.LEDGER: LEDGER,
        archive.CLAIMS: table.to_csv(index=False),
        archive.ENVIRONMENT: json.dumps(env),
        "results/s/metrics.csv": pd.DataFrame(
            {"metric": list(metrics), "value": list(metrics.values())}
        ).to_csv(index=False),
    }
    if losses is not None:
        files[str(compare_figures.AIRFOIL)] = losses.to_csv(index=False)
    for member, text in files.items():
        (root / member).parent.mkdir(parents=True, exist_ok=True)
        (root / member).write_text(text)
    path = tmp_path / f"{name}.zip"
    run = {"host": host, "date": "2026-01-02T00:00:00+00:00", "preset": "smoke", "commit": name}
    archive.write(path, {m: root / m for m in files}, run)
    return archive.read(path)


def two_runs(tmp_path, **kwargs):
    one = make_run(
        tmp_path,
        "one",
        {"s.fast": claims.REPRODUCED, "s.same": claims.REPRODUCED, "s.extra": claims.REPRODUCED},
        {"a": 3.0, "b": 1.0, "c": 1.0},
        **kwargs,
    )
    two = make_run(
        tmp_path,
        "two",
        {"s.same": claims.REPRODUCED, "s.fast": claims.NOT_REPRODUCED},
        {"a": 1.2, "b": 1.0, "c": 1.0},
        host="laptop",
        env=ENV | {"cpu_model": "CPU two"},
    )
    return [one, two]


def test_a_flipped_verdict_comes_first_then_claims_of_one_run(tmp_path):
    runs = two_runs(tmp_path)
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
    runs = two_runs(tmp_path)
    html, rows = compare.render(runs, BOOK, commit="abc")
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>bold</b>" not in html and "Timings &lt;b&gt;bold&lt;/b&gt;" in html
    assert html.index("s.fast") < html.index("s.extra") < html.index("s.same")
    assert compare.ABSENT in html
    assert "CPU one" in html and "CPU two" in html
    assert len(rows) == 3


def test_the_environments_say_where_the_runs_differ(tmp_path):
    runs = two_runs(tmp_path)
    rows = {r["field"]: r for r in compare.environments(runs)}
    assert rows["CPU"]["differs"] and rows["CPU"]["values"] == ["CPU one", "CPU two"]
    assert rows["commit"]["differs"] and not rows["torch"]["differs"]
    assert rows["archive"]["values"] == ["one.zip", "two.zip"]


def test_runs_of_one_host_and_day_are_told_apart_by_their_files(tmp_path):
    one = make_run(tmp_path, "a", {"s.fast": claims.REPRODUCED}, {"a": 2.0, "b": 1.0})
    two = make_run(tmp_path, "b", {"s.fast": claims.REPRODUCED}, {"a": 2.0, "b": 1.0})
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
    assert math.isnan(compare.headline({"kind": "ordering", "metrics": ["a", "b"]}, values))
    assert math.isnan(compare.headline({"kind": "above", "metric": "absent"}, values))


def test_curves_and_ratios_are_drawn_for_every_run_with_hostile_labels(tmp_path):
    losses = pd.DataFrame(
        {"setting": "adam.yogi", "seed": 0, "epoch": [0.5, 1.0], "loss": [0.3, 0.25]}
    )
    runs = two_runs(tmp_path, losses=losses, host="$\\alpha$ <host>")
    names = compare.labels(runs)
    figures = compare_figures.curves(runs, names, BOOK)
    assert [f["title"] for f in figures] == [compare_figures.FAMILIES[0][0]]
    numbers = [compare.claim_values(r) for r in runs]
    rows = compare.table(runs, names)
    ratios = compare_figures.ratios(rows, numbers, names, {"s": "Timings"})
    assert [f["title"] for f in ratios] == ["Timings: ratios"]
    assert all(f["src"].startswith("data:image/png;base64,") for f in figures + ratios)
    html, _ = compare.render(runs, BOOK, commit="abc")
    assert "&lt;host&gt;" in html and "<host>" not in html


def test_a_flip_between_some_runs_outranks_a_claim_missing_from_another(tmp_path):
    third = make_run(tmp_path, "three", {"s.same": claims.REPRODUCED}, {"c": 1.0}, host="gpu")
    runs = [*two_runs(tmp_path), third]
    rows = compare.table(runs, compare.labels(runs)).set_index("id")
    assert rows.loc["s.fast", "group"] == compare.DIFFERS
    assert rows.loc["s.fast", "gpu 2026-01-02: verdict"] == compare.ABSENT
    assert rows.loc["s.extra", "group"] == compare.SOME_RUNS


def test_a_ledger_of_another_shape_gives_no_numbers_and_no_error():
    assert compare.ledger_claims({"sections": 5}) == {}
    assert compare.ledger_claims({"sections": ["x", {"claims": 3}, {"claims": [{"id": 1}]}]}) == {}
    ledger = {"sections": [{"claims": [{"id": "a", "checks": [{"kind": "above"}]}]}]}
    assert list(compare.ledger_claims(ledger)) == ["a"]
