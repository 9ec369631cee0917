import logging
import math

import pandas as pd
import pytest
import torch

from conftest import synthetic
from d2lrepro.core import data, plotting
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
    # The best the test could do here: the 2 pairs that failed without warm-up both rescued,
    # none broken (not the 3 it rescued or broke: a pair that trained without warm-up can
    # only count against the claim).
    assert number["warmup_sweep.least_p"] == pytest.approx(1 / 4)
    note = values["warmup_sweep.least_p"]["note"]
    assert note.startswith("2 informative (lr, seed) pairs whose run without warm-up failed")


def test_a_clear_rescue_is_significant_and_no_difference_is_not():
    lrs, seeds = (0.5, 0.7, 1.0), (0, 1)
    rescue = warmup_sweep.sweep_metrics(sweep_runs([False] * 6, [True] * 6, lrs, seeds))
    same = warmup_sweep.sweep_metrics(sweep_runs([True] * 6, [True] * 6, lrs, seeds))
    p_value = {r["metric"]: r["value"] for r in rescue}["warmup_sweep.sign_p"]
    assert p_value == pytest.approx(1 / 64)
    assert {r["metric"]: r["value"] for r in same}["warmup_sweep.sign_p"] == 1.0
    # Where every run trained without warm-up, there is nothing to rescue: no p could pass.
    least = [
        {r["metric"]: r["value"] for r in rows}["warmup_sweep.least_p"] for rows in (rescue, same)
    ]
    assert least == pytest.approx([1 / 64, 1.0])


def test_warmup_sweep_figure(tmp_path):
    runs = sweep_runs([True, True, False, False], [True, False, True, True])
    runs["warmup_steps"] = runs["warmup"].map({"none": 0, "linear": 100})
    warmup_sweep.draw_sweep(runs, tmp_path / "sweep.png", "footer")
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_a_scaled_sweep_says_its_scale_in_its_figure(monkeypatch):
    runs = sweep_runs([True, True, False, False], [True, False, True, True])
    runs["warmup_steps"] = runs["warmup"].map({"none": 0, "linear": 100})
    drawn = []
    monkeypatch.setattr(plotting, "save", lambda fig, path, footer=None: drawn.append(fig))
    warmup_sweep.draw_sweep(
        runs, "sweep.png", "footer", [["warmup_sweep.train_subset", None, 3000]]
    )
    (fig,) = drawn
    assert [" ".join(t.get_text().split()) for t in fig.texts] == [
        "Scaled from the book preset: 3,000 of 60,000 training images."
    ]
    assert [t.get_text() for t in fig.axes[0].texts] == ["scaled: 3,000 training images"]
    legend = fig.axes[0].get_legend()
    assert legend.get_texts()[0].get_fontsize() >= plotting.readable_pt(fig)
    plotting.pyplot().close(fig)


def test_the_sweep_trains_every_seed_and_labels_what_its_summary_reads(tmp_path, cpu_only):
    path = tmp_path / "fashion_mnist.pt"
    data.save(synthetic(n_train=64, n_test=32), path)
    sweep = {"seeds": [0, 1], "warmup_steps": 2, "epochs": 2, "batch_size": 16}
    sweep |= {"train_subset": None, "test_subset": None}
    log = logging.getLogger("test")
    linear = warmup_sweep.train_seeds(0.5, "linear", sweep, path, log)
    none = warmup_sweep.train_seeds(0.5, "none", sweep, path, log)
    assert linear["seed"].tolist() == [0, 0, 1, 1] and linear["epoch"].tolist() == [1, 2] * 2
    assert (linear["warmup_steps"] == 2).all() and (none["warmup_steps"] == 0).all()
    assert (linear["peak_lr"] == 0.5).all() and (linear["device"] == "cpu").all()
    assert (linear["threads"] == torch.get_num_threads()).all()
    # Same seed, same weights and data order: only the warm-up differs.
    assert linear["train_loss"].tolist() != none["train_loss"].tolist()
    runs = pd.concat([linear, none])
    assert {r["metric"] for r in warmup_sweep.sweep_metrics(runs)} >= {"warmup_sweep.sign_p"}
    warmup_sweep.draw_sweep(runs, tmp_path / "sweep.png", "footer")


def test_the_summary_rows_name_the_devices_of_the_runs_not_the_summary_job_s():
    runs = sweep_runs([True, True, False, False], [True, False, True, True])
    rows = warmup_sweep.sweep_metrics(runs.assign(device="cuda:0"))
    assert {r["device"] for r in rows} == {"cuda:0"}
    mixed = runs.assign(device=["cpu", "cuda:0"] * (len(runs) // 2))
    assert {r["device"] for r in warmup_sweep.sweep_metrics(mixed)} == {"cpu, cuda:0"}
