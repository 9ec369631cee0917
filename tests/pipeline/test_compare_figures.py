"""The comparison's figures: every run's curves and ratios (d2lrepro.pipeline.compare_figures)."""

from pathlib import Path

import pandas as pd
import pytest

from conftest import training_history as history
from conftest import two_archived_runs
from d2lrepro.core import paths, reference
from d2lrepro.pipeline import compare, compare_figures
from d2lrepro.pipeline.archive import Run

BOOK = reference.load()


def test_curves_and_ratios_are_drawn_for_every_run_with_hostile_labels(tmp_path):
    losses = pd.DataFrame(
        {"setting": "adam.yogi", "seed": 0, "epoch": [0.5, 1.0], "loss": [0.3, 0.25]}
    )
    runs = two_archived_runs(tmp_path, losses=losses, host="$\\alpha$ <host>")
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
    assert compare_figures.curves(runs, compare.labels(runs), BOOK) == []
    assert all(read(runs[0]) == {} for _, read, *_ in compare_figures.FAMILIES)


def test_the_data_parallel_curves_are_read_from_each_run_s_histories_only():
    """The experiment's other files (its metrics, top-k logs, machine records) draw nothing."""

    def csv(frame):
        return frame.to_csv(index=False).encode()

    folder = compare_figures.DATA_PARALLEL
    files = {
        f"{folder}/{paths.run_file('lenet.1', 0)}": csv(history([2.3, 1.0], acc=0.8)),
        f"{folder}/{paths.run_file('lenet.1', 1)}": csv(history([2.3, 1.0], acc=0.9)),
        f"{folder}/{paths.run_file('resnet18_b256.2', 0)}": csv(history([2.3], acc=0.7)),
        f"{folder}/{paths.run_file('lenet.1', 0, 'topk.csv')}": csv(pd.DataFrame({"top1": [0.1]})),
        f"{folder}/lenet.1.seed0.machines.json": b"{}",
        f"{folder}/metrics.csv": csv(pd.DataFrame({"metric": ["x"], "value": [1.0]})),
    }
    curves = compare_figures.data_parallel(Run(Path("run.zip"), {}, files))
    assert sorted(curves) == ["mgpu.1gpu", "resnet18_b256.2"]
    assert curves["mgpu.1gpu"].to_dict() == pytest.approx({1: 0.85, 2: 0.85})
    assert curves["resnet18_b256.2"].to_dict() == {1: 0.7}
