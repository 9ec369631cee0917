"""Mutation tests of the lr-scheduling claims: the implemented code broken in a small plausible
way, the metrics produced through the real training loop and summary at a tiny size."""

import logging

import pandas as pd
import pytest

from conftest import verdict_of
from d2lrepro.core import data, models, reference, training
from d2lrepro.optimization import lr_schedules, schedulers, warmup_sweep
from d2lrepro.pipeline import claims
from test_training import synthetic

EPOCHS = 5  # lr_schedules.EARLY_EPOCHS
# The rules' runs pick their device (device_for): here the CPU's, deterministic everywhere.
pytestmark = pytest.mark.usefixtures("cpu_only")


@pytest.fixture(scope="module")
def raw():
    return synthetic(n_train=256, n_test=128)


def book_metrics(raw, runs) -> dict:
    """The runs under the book's semantics, one seed, through train() and training_metrics()."""
    histories = [
        training.train(
            models.lenet(seed=0), raw, EPOCHS, schedulers.schedule(run, "as_written"), batch_size=32
        ).assign(run=run, semantics="as_written", seed=0, device="cpu")
        for run in runs
    ]
    return lr_schedules.training_metrics(pd.concat(histories), reference.load())


def never_applied(monkeypatch):
    """The mutation: the scheduler is never applied, so every run keeps its constructor's lr."""
    for cls, hooks in (
        (schedulers.BookCustom, ("after_epoch",)),
        (schedulers.BookMultiStep, ("start", "after_epoch")),
    ):
        for hook in hooks:
            monkeypatch.setattr(cls, hook, lambda self, *args: None)


def values(rows):
    return {r["metric"]: r["value"] for r in rows}


def test_a_schedule_never_applied_fails_the_warmup_and_cosine_orderings(raw, monkeypatch):
    runs = ("constant", "cosine", "warmup")
    intact = values(book_metrics(raw, runs))
    # The schedules change what the runs learn: warm-up's early epochs differ from cosine's.
    assert intact["warmup.as_written.early_test_acc"] != intact["cosine.as_written.early_test_acc"]

    never_applied(monkeypatch)
    rows = book_metrics(raw, runs)
    m = values(rows)
    # Cosine and warm-up both start at 0.3: without their schedules they are the constant run.
    assert m["cosine.as_written.test_acc"] == m["constant.as_written.test_acc"]
    assert m["warmup.as_written.early_test_acc"] == m["cosine.as_written.early_test_acc"]
    for claim in ("lrs.cosine_train", "lrs.warmup_train"):
        assert verdict_of(claim, rows) == claims.NOT_REPRODUCED


@pytest.fixture(scope="module")
def data_path(raw, tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "fashion_mnist.pt"
    data.save(raw, path)
    return path


def sweep_runs(data_path, lrs=(1.0, 2.0), seeds=(0, 1), warmup_steps=4) -> pd.DataFrame:
    """The warm-up sweep's runs as its rule makes them: each peak lr without and with a
    linear warm-up, each seed from the same weights, one epoch."""
    sweep = {"seeds": list(seeds), "warmup_steps": warmup_steps, "epochs": 1, "batch_size": 64}
    sweep |= {"train_subset": None, "test_subset": None}
    log = logging.getLogger("test")
    return pd.concat(
        warmup_sweep.train_seeds(lr, variant, sweep, data_path, log)
        for variant in ("none", "linear")
        for lr in lrs
    )


def test_a_warmup_that_ignores_its_steps_cannot_pass_the_sign_test(data_path, monkeypatch):
    """The mutation: the warm-up variant runs without its warm-up (warmup_steps 0). Its runs
    are then the runs without warm-up, so it rescues and breaks nothing: p = 1. (No set-up that
    trains in seconds showed warm-up rescuing enough runs for p < 0.05, so only this side is
    tested here.)"""
    real = training.train
    monkeypatch.setattr(
        warmup_sweep, "train", lambda *args, warmup_steps=0, **kw: real(*args, **kw)
    )
    rows = warmup_sweep.sweep_metrics(sweep_runs(data_path))
    m = values(rows)
    assert m["warmup_sweep.rescued"] == m["warmup_sweep.broken"] == 0
    assert m["warmup_sweep.sign_p"] == 1
    assert verdict_of("lrs.warmup_high_lr", rows) == claims.NOT_REPRODUCED
