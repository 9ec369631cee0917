"""Mutation tests of the lr-scheduling claims: the implemented code broken in a small plausible
way, the metrics produced through the real training loop and summary at a tiny size."""

import pandas as pd
import pytest

from conftest import verdict_of
from d2lrepro.core import models, reference
from d2lrepro.optimization import lr_schedules, schedulers, warmup_sweep
from d2lrepro.pipeline import claims
from test_lr_schedules import synthetic

EPOCHS = 5  # lr_schedules.EARLY_EPOCHS


@pytest.fixture(scope="module")
def raw():
    return synthetic(n_train=256, n_test=128)


def book_metrics(raw, runs) -> dict:
    """The runs under the book's semantics, one seed, through train() and training_metrics()."""
    histories = [
        lr_schedules.train(
            models.lenet(seed=0), raw, EPOCHS, schedulers.schedule(run, "book"), batch_size=32
        ).assign(run=run, semantics="book", seed=0, device="cpu")
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
    assert intact["warmup.book.early_test_acc"] != intact["cosine.book.early_test_acc"]

    never_applied(monkeypatch)
    rows = book_metrics(raw, runs)
    m = values(rows)
    # Cosine and warm-up both start at 0.3: without their schedules they are the constant run.
    assert m["cosine.book.test_acc"] == m["constant.book.test_acc"]
    assert m["warmup.book.early_test_acc"] == m["cosine.book.early_test_acc"]
    for claim in ("lrs.cosine_train", "lrs.warmup_train"):
        assert verdict_of(claim, rows) == claims.NOT_REPRODUCED


def sweep_runs(raw, lrs=(1.0, 2.0), seeds=(0, 1), warmup_steps=4) -> pd.DataFrame:
    """The warm-up sweep's runs as its rule makes them: each peak lr and seed without and with
    a linear warm-up, from the same weights, one epoch."""
    runs = []
    for variant, steps in (("none", 0), ("linear", warmup_steps)):
        for lr in lrs:
            for seed in seeds:
                history = lr_schedules.train(
                    models.lenet(seed=seed), raw, 1, [lr], 64, seed=seed, warmup_steps=steps
                )
                runs.append(history.assign(peak_lr=lr, warmup=variant, warmup_steps=steps))
    return pd.concat([r.assign(seed=s) for r, s in zip(runs, 2 * len(lrs) * list(seeds))])


def test_a_warmup_that_ignores_its_steps_cannot_pass_the_sign_test(raw, monkeypatch):
    """The mutation: the warm-up variant runs without its warm-up (warmup_steps 0). Its runs
    are then the runs without warm-up, so it rescues and breaks nothing: p = 1. (No set-up that
    trains in seconds showed warm-up rescuing enough runs for p < 0.05, so only this side is
    tested here.)"""
    real = lr_schedules.train
    monkeypatch.setattr(
        lr_schedules, "train", lambda *args, warmup_steps=0, **kw: real(*args, **kw)
    )
    rows = warmup_sweep.sweep_metrics(sweep_runs(raw))
    m = values(rows)
    assert m["warmup_sweep.rescued"] == m["warmup_sweep.broken"] == 0
    assert m["warmup_sweep.sign_p"] == 1
    assert verdict_of("lrs.warmup_high_lr", rows) == claims.NOT_REPRODUCED
