"""Scratch against torch.optim on the airfoil data (d2lrepro.optimization.airfoil_compare)."""

from test_airfoil import SETTINGS

from d2lrepro.optimization import airfoil_compare

# The torch settings of two concise claims, as the config writes them.
CONCISE = {name: SETTINGS[name] for name in ("momentum.concise", "adam.concise")}


def test_scratch_and_torch_sgd_momentum_agree_but_adam_does_not_exactly(linear_data):
    compare = airfoil_compare.compare_implementation
    gaps = {
        m["metric"]: m["value"]
        for name, setting in CONCISE.items()
        for m in compare(name, setting, linear_data, 2, 10, 100, seed=0)
    }
    assert set(gaps) == {
        "momentum.concise.scratch_vs_torch_gap",
        "adam.concise.scratch_vs_torch_gap",
    }
    assert gaps["momentum.concise.scratch_vs_torch_gap"] < 1e-6
    assert gaps["adam.concise.scratch_vs_torch_gap"] > 0


def test_the_gap_at_an_epoch_is_signed_and_taken_over_the_seeds(linear_data):
    """How far torch.optim's loss lies above the scratch one at one evaluation: its median
    over the seeds and their IQR; the same optimizer both ways gives no gap."""
    rows = airfoil_compare.compare_at_epoch(
        "momentum.concise", CONCISE["momentum.concise"], linear_data, 2, 10, 100, [0, 1, 2], 1.0
    )
    values = {r["metric"]: r["value"] for r in rows}
    assert set(values) == {
        "momentum.concise.scratch_vs_torch_gap_at_1",
        "momentum.concise.scratch_vs_torch_gap_at_1_iqr",
    }
    assert abs(values["momentum.concise.scratch_vs_torch_gap_at_1"]) < 1e-6


def test_a_diverged_run_fails_the_gap_and_says_which(linear_data):
    """Runs that blow up stop early: their curves give no gap, even where both diverge alike
    (momentum at lr 0.4 explodes on this problem from either implementation)."""
    setting = {**CONCISE["momentum.concise"], "lr": 0.4}
    rows = airfoil_compare.compare_implementation("m", setting, linear_data, 2, 10, 100, seed=0)
    rows += airfoil_compare.compare_at_epoch("m", setting, linear_data, 2, 10, 100, [0, 1], 1.0)
    assert [r["status"] for r in rows] == ["failed"] * 3
    assert "the scratch run diverged" in rows[0]["note"]
    assert "the torch.optim run diverged" in rows[0]["note"]
    assert "(seed 0)" in rows[1]["note"]


def test_one_diverged_run_of_two_fails_the_gap(linear_data, monkeypatch):
    """A curve cut short on one side only (the other kept its length) fails too, where the
    gap could not be taken point by point."""
    train = airfoil_compare.train_airfoil

    def torch_diverges(*args, implementation, **kwargs):
        frame = train(*args, implementation=implementation, **kwargs)
        return frame.head(2).assign(diverged=True) if implementation == "torch" else frame

    monkeypatch.setattr(airfoil_compare, "train_airfoil", torch_diverges)
    setting = CONCISE["momentum.concise"]
    [row] = airfoil_compare.compare_implementation("m", setting, linear_data, 2, 10, 100, 0)
    assert row["status"] == "failed"
    assert row["note"] == "the torch.optim run diverged at epoch 0.667 (seed 0)"
