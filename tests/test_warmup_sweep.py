import math

import pandas as pd
import pytest

from d2lrepro.optimization import warmup_sweep


def sweep_runs(trained_none, trained_linear, lrs=(0.5, 1.0), seeds=(0, 1)):
    """One-epoch sweep rows: test acc 0.7 where a run trained, 0.1 (dead) or an explosion
    (diverged, no test acc) where not."""
    rows = []
    for variant, trained in (("none", trained_none), ("linear", trained_linear)):
        for (lr, seed), ok in zip(((lr, s) for lr in lrs for s in seeds), trained):
            exploded = not ok and seed == 1
            acc = 0.7 if ok else (math.nan if exploded else 0.1)
            rows.append(
                {"warmup": variant, "peak_lr": lr, "seed": seed, "epoch": 1}
                | {"test_acc": acc, "diverged": exploded}
            )
    return pd.DataFrame(rows)


def test_warmup_sweep_counts_rescued_and_broken_pairs():
    # (lr, seed) pairs in the order (0.5, 0), (0.5, 1), (1.0, 0), (1.0, 1)
    runs = sweep_runs([True, True, False, False], [True, False, True, True])
    values = {r["metric"]: r for r in warmup_sweep.sweep_metrics(runs)}
    number = {name: row["value"] for name, row in values.items()}
    assert number["warmup_sweep.rescued"] == 2 and number["warmup_sweep.broken"] == 1
    assert number["warmup_sweep.none.failed_runs"] == 2
    assert number["warmup_sweep.linear.failed_runs"] == 1
    assert number["warmup_sweep.none.highest_lr"] == 0.5
    assert number["warmup_sweep.linear.highest_lr"] == 1.0  # lr 0.5 lost a seed
    assert number["warmup_sweep.sign_p"] == pytest.approx(4 / 8)  # P(X >= 2), X ~ B(3, 1/2)
    assert "rescued 2 and broke 1 of 4" in values["warmup_sweep.sign_p"]["note"]


def test_a_clear_rescue_is_significant_and_no_difference_is_not():
    lrs, seeds = (0.5, 0.7, 1.0), (0, 1)
    rescue = warmup_sweep.sweep_metrics(sweep_runs([False] * 6, [True] * 6, lrs, seeds))
    same = warmup_sweep.sweep_metrics(sweep_runs([True] * 6, [True] * 6, lrs, seeds))
    p_value = {r["metric"]: r["value"] for r in rescue}["warmup_sweep.sign_p"]
    assert p_value == pytest.approx(1 / 64)
    assert {r["metric"]: r["value"] for r in same}["warmup_sweep.sign_p"] == 1.0


def test_warmup_sweep_figure(tmp_path):
    runs = sweep_runs([True, True, False, False], [True, False, True, True])
    runs["warmup_steps"] = runs["warmup"].map({"none": 0, "linear": 100})
    warmup_sweep.draw_sweep(runs, tmp_path / "sweep.png", "footer")
    assert (tmp_path / "sweep.png").stat().st_size > 0
