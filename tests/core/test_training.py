"""The training loop a single-device experiment reuses (d2lrepro.core.training), on
synthetic images that are easy to learn."""

import logging
import math

import pytest
import torch

from conftest import synthetic
from d2lrepro.core import models, training


@pytest.fixture(scope="module")
def raw():
    return synthetic()


def test_train_rows_columns_and_learning(raw, caplog):
    lrs = [0.5, 0.5, 0.5]
    seen = []
    with caplog.at_level(logging.INFO, logger="t"):
        df = training.train(
            models.lenet(seed=0),
            raw,
            3,
            lrs,
            batch_size=32,
            seed=0,
            log=logging.getLogger("t"),
            on_epoch=seen.append,
        )
    assert list(df.columns) == training.COLUMNS
    assert list(df["epoch"]) == [1, 2, 3]
    assert list(df["lr"]) == lrs
    assert df["test_acc"].between(0, 1).all() and df["train_acc"].between(0, 1).all()
    assert (df["seconds"] > 0).all() and (df["samples_per_s"] > 0).all()
    assert not df["diverged"].any() and df.attrs["diverged"] is False
    assert df["train_loss"].iloc[2] < df["train_loss"].iloc[1] < df["train_loss"].iloc[0]
    assert df["test_acc"].iloc[-1] > 0.5
    assert len(seen) == 3 and seen[0]["epoch"] == 1
    assert sum("epoch" in r.getMessage() for r in caplog.records) == 3


def test_lr_set_per_epoch_and_partial_batch(raw):
    net = models.lenet(seed=0)
    df = training.train(
        net, raw, 2, [0.0, 0.0, 5.0], batch_size=100, train_subset=250, test_subset=30
    )
    assert list(df["lr"]) == [0.0, 0.0]
    # lr 0: weights unchanged
    for p, q in zip(net.parameters(), models.lenet(seed=0).parameters()):
        assert torch.equal(p, q)
    assert df["samples_per_s"].iloc[0] * df["seconds"].iloc[0] == pytest.approx(250)


def test_too_few_learning_rates(raw):
    with pytest.raises(ValueError):
        training.train(models.lenet(), raw, 3, [0.1, 0.1])


def test_divergence_is_recorded(raw):
    df = training.train(
        models.lenet(seed=0), raw, 3, [1e6] * 3, batch_size=32, train_subset=256, test_subset=32
    )
    assert df.attrs["diverged"] is True
    assert bool(df["diverged"].iloc[-1])
    assert len(df) == 1
    assert not math.isfinite(df["train_loss"].iloc[-1])
    assert math.isnan(df["test_acc"].iloc[-1])


def test_deterministic_on_cpu(raw):
    runs = [
        training.train(
            models.lenet(seed=5), raw, 2, [0.5, 0.5], batch_size=64, seed=7, train_subset=256
        )
        for _ in range(2)
    ]
    assert list(runs[0]["train_loss"]) == list(runs[1]["train_loss"])
    assert list(runs[0]["test_acc"]) == list(runs[1]["test_acc"])
    other = training.train(
        models.lenet(seed=5), raw, 2, [0.5, 0.5], batch_size=64, seed=8, train_subset=256
    )
    assert list(other["train_loss"]) != list(runs[0]["train_loss"])


def test_a_run_that_blows_up_without_nan_is_marked_diverged(raw, monkeypatch):
    """The failure seen in practice: a finite loss of 1e20 at chance accuracy."""
    losses = iter([2.3, 1.0, 1e20, 1e20])
    real = training.exploded
    monkeypatch.setattr(training, "exploded", lambda loss, first: real(next(losses), 2.3))
    df = training.train(models.lenet(seed=0), raw, 4, [0.1] * 4, 128, train_subset=256)
    assert df["diverged"].tolist() == [False, False, True] and df.attrs["diverged"]


def test_an_explosion_in_the_first_epoch_is_measured_against_the_fresh_networks_loss(
    raw, monkeypatch
):
    """The reference is the first batch's loss (about ln 10 for a fresh network), not the
    first epoch's mean, which an explosion within that epoch would inflate (seen at lr 4:
    a first-epoch mean of 7e5, then 2.9, went unflagged)."""
    references = []
    real = training.exploded
    monkeypatch.setattr(
        training, "exploded", lambda loss, start: references.append(start) or real(loss, start)
    )
    training.train(models.lenet(seed=0), raw, 2, [0.1] * 2, 128, train_subset=256)
    assert len(set(references)) == 1 and abs(references[0] - math.log(10)) < 0.2


def test_warmup_climbs_linearly_per_step_then_holds(raw, monkeypatch):
    used = []
    step = torch.optim.SGD.step

    def record(self, *args, **kwargs):
        used.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.SGD, "step", record)
    # 512 examples at batch 200: 3 steps per epoch
    lrs = [0.8, 0.8, 0.4]
    training.train(models.lenet(seed=0), raw, 3, lrs, batch_size=200, warmup_steps=4)
    assert used == pytest.approx([0.2, 0.4, 0.6, 0.8, 0.8, 0.8, 0.4, 0.4, 0.4])


def test_each_epoch_records_how_far_the_weights_moved(raw):
    net = models.lenet(seed=0)
    start = [p.detach().clone() for p in net.parameters()]
    df = training.train(net, raw, 2, [0.0, 0.3], batch_size=128, train_subset=256)
    moved = max((p.detach() - s).abs().max().item() for p, s in zip(net.parameters(), start))
    assert df["param_change"].iloc[0] == 0 and df["param_change"].iloc[1] == moved > 0


def test_an_epochs_log_line_gives_its_numbers_and_flags_a_divergence(caplog):
    row = {"epoch": 2, "lr": 0.05, "train_loss": 0.5, "train_acc": 0.8, "test_acc": 0.75}
    row |= {"seconds": 1.5, "samples_per_s": 400.0, "diverged": False}
    with caplog.at_level(logging.INFO, logger="t"):
        training._log_epoch(logging.getLogger("t"), row, 3)
        training._log_epoch(logging.getLogger("t"), row | {"diverged": True}, 3)
    calm, diverged = (r.getMessage() for r in caplog.records)
    assert calm == (
        "epoch 2/3 lr 0.05: train loss 0.5000, train acc 0.8000, test acc 0.7500, 1.50 s"
        " (400 examples/s)"
    )
    assert diverged == calm + " DIVERGED"
