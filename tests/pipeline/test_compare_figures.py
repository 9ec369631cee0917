"""The comparison's figures: every run's curves and ratios (d2lrepro.pipeline.compare_figures)."""

from pathlib import Path

import pandas as pd
import pytest

from conftest import training_history as history
from conftest import two_archived_runs
from d2lrepro.core import paths, reference
from d2lrepro.pipeline import claims, compare, compare_figures
from d2lrepro.pipeline.archive import Run

BOOK = reference.load()
FAMILIES = compare_figures.families(claims.load())


def test_curves_and_ratios_are_drawn_for_every_run_with_hostile_labels(tmp_path):
    losses = pd.DataFrame(
        {"setting": "adam.yogi", "seed": 0, "epoch": [0.5, 1.0], "loss": [0.3, 0.25]}
    )
    runs = two_archived_runs(tmp_path, losses=losses, host="$\\alpha$ <host>")
    names = compare.labels(runs)
    figures = compare_figures.curves(runs, names, BOOK, FAMILIES)
    assert [f["title"] for f in figures] == ["Airfoil: training loss, median over seeds"]
    numbers = [compare.claim_values(r) for r in runs]
    rows = compare.table(runs, names)
    ratios = compare_figures.ratios(rows, numbers, names, {"s": "Timings"})
    assert [f["title"] for f in ratios] == ["Timings: ratios"]
    assert all(f["src"].startswith("data:image/png;base64,") for f in figures + ratios)
    html, _ = compare.render(runs, BOOK, commit="abc")
    assert "&lt;host&gt;" in html and "<host>" not in html


def test_a_ratio_is_a_ratio_check_or_a_speedup_or_an_x_over_y_bound():
    assert compare_figures.is_ratio({"kind": "ratio_below", "numerator": "a", "denominator": "b"})
    assert compare_figures.is_ratio({"kind": "sum_of_parts", "whole": "w", "parts": ["p"]})
    assert compare_figures.is_ratio({"kind": "above", "metric": "lenet.speedup", "bound": 1.5})
    assert compare_figures.is_ratio({"kind": "below", "metric": "t1_over_t2", "bound": 1})
    assert not compare_figures.is_ratio({"kind": "above", "metric": "lenet.test_acc"})
    assert not compare_figures.is_ratio({"kind": "within", "metric": "a_over_b", "target": 1})


def test_a_label_is_drawn_as_written():
    assert compare_figures.plain("$5 per $") == r"\$5 per \$"


def test_the_curves_are_medians_over_seeds_per_epoch():
    frame = pd.DataFrame(
        {
            "setting": ["a", "a", "a", "a", "b"],
            "epoch": [1, 1, 1, 2, "x"],
            "loss": [0.5, 0.7, 0.9, "0.3", 1.0],
        }
    )
    curves = compare_figures.median_curves(frame, "setting", "loss")
    assert list(curves) == ["a"]  # b has no epoch to draw
    assert curves["a"].to_dict() == {1: 0.7, 2: 0.3}


def test_a_run_without_the_tables_draws_no_curves(tmp_path):
    runs = two_archived_runs(tmp_path)
    assert compare_figures.curves(runs, compare.labels(runs), BOOK, FAMILIES) == []
    assert all(compare_figures.read(runs[0], family) == {} for family in FAMILIES)


def test_the_ledger_declares_three_families_each_readable():
    """Airfoil, the lr schedules and the data-parallel runs, in ledger order; each mapping of
    run names to the book's curve ids is found."""
    assert [f["title"].split(":")[0] for f in FAMILIES] == [
        "Airfoil",
        "Learning-rate schedules",
        "Training on 1 and 2 devices",
    ]
    assert all(isinstance(compare_figures.curve_ids(f), dict) for f in FAMILIES)


def test_a_table_family_keeps_the_rows_its_where_names():
    family = {"table": "t.csv", "curve": "run", "where": {"semantics": "as_written"}, "y": "acc"}
    family |= {"curve_ids": "d2lrepro.optimization.lr_schedules.BOOK_CURVE_IDS"}
    table = pd.DataFrame(
        {
            "run": ["constant", "constant", "cosine"],
            "semantics": ["as_written", "intended", "intended"],
            "epoch": [1, 1, 1],
            "acc": [0.5, 0.9, 0.8],
        }
    )
    run = Run(Path("run.zip"), {}, {"t.csv": table.to_csv(index=False).encode()})
    ids = compare_figures.curve_ids(family)
    assert {k: v.to_dict() for k, v in compare_figures.read(run, family).items()} == {
        ids.get("constant", "constant"): {1: 0.5}
    }


def test_the_data_parallel_curves_are_read_from_each_run_s_histories_only():
    """The experiment's other files (its metrics, top-k logs, machine records) draw nothing."""

    def csv(frame):
        return frame.to_csv(index=False).encode()

    (family,) = [f for f in FAMILIES if "run_files" in f]
    folder = family["run_files"]
    files = {
        f"{folder}/{paths.run_file('lenet.1', 0)}": csv(history([2.3, 1.0], acc=0.8)),
        f"{folder}/{paths.run_file('lenet.1', 1)}": csv(history([2.3, 1.0], acc=0.9)),
        f"{folder}/{paths.run_file('resnet18_b256.2', 0)}": csv(history([2.3], acc=0.7)),
        f"{folder}/{paths.run_file('lenet.1', 0, 'topk.csv')}": csv(pd.DataFrame({"top1": [0.1]})),
        f"{folder}/lenet.1.seed0.machines.json": b"{}",
        f"{folder}/metrics.csv": csv(pd.DataFrame({"metric": ["x"], "value": [1.0]})),
    }
    curves = compare_figures.read(Run(Path("run.zip"), {}, files), family)
    assert sorted(curves) == ["mgpu.1gpu", "resnet18_b256.2"]
    assert curves["mgpu.1gpu"].to_dict() == pytest.approx({1: 0.85, 2: 0.85})
    assert curves["resnet18_b256.2"].to_dict() == {1: 0.7}
