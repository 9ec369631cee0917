import copy
import logging
import math

import pytest
import torch

from conftest import verdict_of
from d2lrepro.core import data, models, reference, results
from d2lrepro.optimization import lr_schedules, schedulers
from d2lrepro.pipeline import claims


def synthetic(n_train=512, n_test=256, seed=0):
    """Uint8 28x28 images whose class is marked by a bright 4x4 block (easy to learn)."""
    g = torch.Generator().manual_seed(seed)

    def make(n):
        labels = torch.randint(0, 10, (n,), generator=g, dtype=torch.uint8)
        images = torch.randint(0, 60, (n, 28, 28), generator=g, dtype=torch.uint8)
        for c in range(10):
            r, k = divmod(c, 5)
            images[labels == c, 4 + 10 * r : 8 + 10 * r, 2 + 5 * k : 6 + 5 * k] = 255
        return images, labels

    tri, trl = make(n_train)
    tei, tel = make(n_test)
    return {"train_images": tri, "train_labels": trl, "test_images": tei, "test_labels": tel}


@pytest.fixture(scope="module")
def raw():
    return synthetic()


def test_lenet_shape_and_parameters():
    net = models.lenet(seed=0)
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    expected = (
        (6 * 25 + 6) + (16 * 6 * 25 + 16) + (400 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10)
    )
    assert sum(p.numel() for p in net.parameters()) == expected == 61706


def test_lenet_seeded():
    a, b, c = models.lenet(seed=1), models.lenet(seed=1), models.lenet(seed=2)
    state = torch.get_rng_state()
    models.lenet(seed=3)
    assert torch.equal(state, torch.get_rng_state())  # global RNG untouched
    for pa, pb, pc in zip(a.parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb)
        assert not torch.equal(pa, pc)


def test_prepare_data(raw):
    fashion = data.prepare_data(raw, train_subset=100, test_subset=50)
    assert fashion.train_x.shape == (100, 1, 28, 28) and fashion.train_x.dtype == torch.float32
    assert fashion.test_x.shape == (50, 1, 28, 28)
    assert fashion.train_y.dtype == torch.int64
    assert float(fashion.train_x.max()) == 1.0 and float(fashion.train_x.min()) >= 0.0
    assert torch.equal(fashion.train_x[3, 0], raw["train_images"][3].float() / 255)


def test_train_rows_columns_and_learning(raw, caplog):
    lrs = [0.5, 0.5, 0.5]
    seen = []
    with caplog.at_level(logging.INFO, logger="t"):
        df = lr_schedules.train(
            models.lenet(seed=0),
            raw,
            3,
            lrs,
            batch_size=32,
            seed=0,
            log=logging.getLogger("t"),
            on_epoch=seen.append,
        )
    assert list(df.columns) == lr_schedules.COLUMNS
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
    df = lr_schedules.train(
        net, raw, 2, [0.0, 0.0, 5.0], batch_size=100, train_subset=250, test_subset=30
    )
    assert list(df["lr"]) == [0.0, 0.0]
    # lr 0: weights unchanged
    for p, q in zip(net.parameters(), models.lenet(seed=0).parameters()):
        assert torch.equal(p, q)
    assert df["samples_per_s"].iloc[0] * df["seconds"].iloc[0] == pytest.approx(250)


def test_too_few_learning_rates(raw):
    with pytest.raises(ValueError):
        lr_schedules.train(models.lenet(), raw, 3, [0.1, 0.1])


def test_divergence_is_recorded(raw):
    df = lr_schedules.train(
        models.lenet(seed=0), raw, 3, [1e6] * 3, batch_size=32, train_subset=256, test_subset=32
    )
    assert df.attrs["diverged"] is True
    assert bool(df["diverged"].iloc[-1])
    assert len(df) == 1
    assert not math.isfinite(df["train_loss"].iloc[-1])
    assert math.isnan(df["test_acc"].iloc[-1])


def test_deterministic_on_cpu(raw):
    runs = [
        lr_schedules.train(
            models.lenet(seed=5), raw, 2, [0.5, 0.5], batch_size=64, seed=7, train_subset=256
        )
        for _ in range(2)
    ]
    assert list(runs[0]["train_loss"]) == list(runs[1]["train_loss"])
    assert list(runs[0]["test_acc"]) == list(runs[1]["test_acc"])
    other = lr_schedules.train(
        models.lenet(seed=5), raw, 2, [0.5, 0.5], batch_size=64, seed=8, train_subset=256
    )
    assert list(other["train_loss"]) != list(runs[0]["train_loss"])


def test_a_loss_far_above_its_start_is_divergence_too():
    assert not results.exploded(2.5, 2.3) and results.exploded(7.0, 2.3)
    assert results.exploded(math.nan, 2.3) and results.exploded(math.inf, 2.3)
    assert results.diverged([2.3, 0.5, 7.0]) and not results.diverged([2.3, 0.5, 0.4])


def test_a_run_that_blows_up_without_nan_is_marked_diverged(raw, monkeypatch):
    """The failure seen in practice: a finite loss of 1e20 at chance accuracy."""
    losses = iter([2.3, 1.0, 1e20, 1e20])
    real = lr_schedules.exploded
    monkeypatch.setattr(lr_schedules, "exploded", lambda loss, first: real(next(losses), 2.3))
    df = lr_schedules.train(models.lenet(seed=0), raw, 4, [0.1] * 4, 128, train_subset=256)
    assert df["diverged"].tolist() == [False, False, True] and df.attrs["diverged"]


def test_an_explosion_in_the_first_epoch_is_measured_against_the_fresh_networks_loss(
    raw, monkeypatch
):
    """The reference is the first batch's loss (about ln 10 for a fresh network), not the
    first epoch's mean, which an explosion within that epoch would inflate (seen at lr 4:
    a first-epoch mean of 7e5, then 2.9, went unflagged)."""
    references = []
    real = lr_schedules.exploded
    monkeypatch.setattr(
        lr_schedules, "exploded", lambda loss, start: references.append(start) or real(loss, start)
    )
    lr_schedules.train(models.lenet(seed=0), raw, 2, [0.1] * 2, 128, train_subset=256)
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
    lr_schedules.train(models.lenet(seed=0), raw, 3, lrs, batch_size=200, warmup_steps=4)
    assert used == pytest.approx([0.2, 0.4, 0.6, 0.8, 0.8, 0.8, 0.4, 0.4, 0.4])


def test_set_lr_is_measured_from_the_step_sgd_takes():
    assert lr_schedules.lr_after_setting_by_hand() == pytest.approx(0.1)
    rows = [results.metric("set_lr.step_lr", lr_schedules.lr_after_setting_by_hand())]
    assert verdict_of("lrs.set_lr", rows) == claims.REPRODUCED
    assert verdict_of("lrs.set_lr", [results.metric("set_lr.step_lr", 0.3)]) == (
        claims.NOT_REPRODUCED
    )


@pytest.mark.parametrize(
    "wrong",
    [
        lambda trainer, lr: copy.deepcopy(trainer.param_groups)[0].update(lr=lr),
        lambda trainer, lr: trainer.param_groups[0].update(learning_rate=lr),
    ],
    ids=["a copy of param_groups", "the wrong key"],
)
def test_set_lr_on_a_copy_or_the_wrong_key_is_not_reproduced(monkeypatch, wrong):
    monkeypatch.setattr(lr_schedules, "set_lr_by_hand", wrong)
    step_lr = lr_schedules.lr_after_setting_by_hand()
    assert step_lr == pytest.approx(0.3)  # the constructor's lr
    rows = [results.metric("set_lr.step_lr", step_lr)]
    assert verdict_of("lrs.set_lr", rows) == claims.NOT_REPRODUCED


def warmup_book_metrics(raw):
    """Warm-up under the book's semantics for 2 epochs, through the real loop and summary."""
    history = lr_schedules.train(
        models.lenet(seed=0), raw, 2, schedulers.schedule("warmup", "book"), batch_size=16
    )
    history = history.assign(run="warmup", semantics="book", seed=0, device="cpu")
    return lr_schedules.training_metrics(history, reference.load())


def test_warmup_epochs_1_and_2_are_identical_in_the_books_loop(raw):
    rows = warmup_book_metrics(raw)
    m = {r["metric"]: r["value"] for r in rows}
    assert m["warmup.book.param_change_epoch2"] == 0  # epoch 2 ran at scheduler(0) = 0
    assert m["warmup.book.test_acc_epoch2_minus_1"] == 0
    assert verdict_of("lrs.warmup_train.epochs12", rows) == claims.REPRODUCED


def test_warmup_applied_on_time_makes_epochs_1_and_2_differ(raw, monkeypatch):
    """The mutation: the book's scheduler applied before each epoch instead of after it."""
    monkeypatch.setattr(schedulers, "BookCustom", schedulers.OnTime)
    rows = warmup_book_metrics(raw)
    m = {r["metric"]: r["value"] for r in rows}
    assert m["warmup.book.param_change_epoch2"] > 1e-6  # epoch 2 ran at scheduler(1) = 0.06
    assert m["warmup.book.test_acc_epoch2_minus_1"] != 0
    assert verdict_of("lrs.warmup_train.epochs12", rows) == claims.NOT_REPRODUCED


def test_a_weight_that_moves_in_epoch_2_fails_the_claim_on_its_own(raw):
    rows = warmup_book_metrics(raw)
    moved = [
        r | {"value": 1e-4} if r["metric"].endswith("param_change_epoch2") else r for r in rows
    ]
    assert verdict_of("lrs.warmup_train.epochs12", moved) == claims.NOT_REPRODUCED


def test_each_epoch_records_how_far_the_weights_moved(raw):
    net = models.lenet(seed=0)
    start = [p.detach().clone() for p in net.parameters()]
    df = lr_schedules.train(net, raw, 2, [0.0, 0.3], batch_size=128, train_subset=256)
    moved = max((p.detach() - s).abs().max().item() for p, s in zip(net.parameters(), start))
    assert df["param_change"].iloc[0] == 0 and df["param_change"].iloc[1] == moved > 0
