import math

import pytest
import torch

from d2lrepro.core import models, training
from d2lrepro.optimization import schedulers as s


def test_square_root():
    sched = s.SquareRootScheduler(lr=0.1)
    v = s.values(sched, 30)
    assert v[0] == pytest.approx(0.1)
    assert v[29] == pytest.approx(0.1 / math.sqrt(30))
    assert round(v[29], 4) == 0.0183


def test_factor_is_stateful():
    sched = s.FactorScheduler(factor=0.9, stop_factor_lr=1e-2, base_lr=2.0)
    v = s.values(sched, 50)
    assert v[0] == pytest.approx(1.8)
    assert v[49] == pytest.approx(2.0 * 0.9**50)
    assert v[49] == pytest.approx(0.0103, abs=1e-4)
    # a further call keeps shrinking until the floor
    assert s.values(sched, 100)[-1] == pytest.approx(1e-2)


def test_multistep_plot():
    v = s.multistep_plot_values(30, lr=0.5, milestones=(15, 30), gamma=0.5)
    assert v[:15] == [0.5] * 15
    assert v[15:] == [0.25] * 15


def test_cosine_without_warmup():
    sched = s.CosineScheduler(max_update=20, base_lr=0.3, final_lr=0.01)
    v = s.values(sched, 30)
    assert v[0] == pytest.approx(0.3)
    assert v[10] == pytest.approx(0.01 + 0.29 / 2)
    for t in range(20, 30):
        assert v[t] == pytest.approx(0.01)


def test_cosine_with_warmup():
    sched = s.CosineScheduler(20, warmup_steps=5, base_lr=0.3, final_lr=0.01)
    v = s.values(sched, 30)
    assert v[:6] == pytest.approx([0.0, 0.06, 0.12, 0.18, 0.24, 0.3])
    assert v[20] == pytest.approx(0.01)
    assert v[29] == pytest.approx(0.01)


def test_cosine_past_max_update_on_fresh_object():
    assert s.CosineScheduler(20, base_lr=0.3, final_lr=0.01)(25) == pytest.approx(0.01)


def ran_with(run, semantics, epochs=30):
    """The lr each epoch of the section's run ran with, read from the optimizer by the real
    training loop (one tiny image per epoch)."""
    images = torch.zeros(1, 28, 28, dtype=torch.uint8)
    labels = torch.zeros(1, dtype=torch.uint8)
    raw = {"train_images": images, "train_labels": labels}
    raw |= {"test_images": images, "test_labels": labels}
    df = training.train(models.lenet(seed=0), raw, epochs, s.schedule(run, semantics), 1)
    assert len(df) == epochs
    return list(df["lr"])


def test_book_semantics_are_one_epoch_late():
    cos = s.CosineScheduler(20, warmup_steps=5, base_lr=0.3, final_lr=0.01)
    intended = ran_with("warmup", "intended")
    book = ran_with("warmup", "as_written")
    assert intended == pytest.approx(s.values(cos, 30))
    assert book[0] == 0.3  # the optimizer's constructor lr
    assert book[1] == 0.0  # scheduler(0): a whole epoch at lr 0
    assert book[1:] == pytest.approx(intended[:-1])

    sqrt = ran_with("sqrt", "as_written")
    assert sqrt[0] == pytest.approx(0.1) and sqrt[1] == pytest.approx(0.1)
    assert sqrt[2] == pytest.approx(0.1 / math.sqrt(2))
    assert ran_with("sqrt", "intended")[29] == pytest.approx(0.1 / math.sqrt(30))

    cosine = ran_with("cosine", "as_written")
    assert cosine[:2] == pytest.approx([0.3, 0.3])
    assert cosine[21:] == pytest.approx([0.01] * 9)


def test_multistep_semantics():
    # the book trains with the MultiStepLR its plot loop has stepped 30 times
    assert ran_with("multistep", "as_written") == [0.125] * 30
    assert ran_with("multistep", "intended") == [0.5] * 15 + [0.25] * 15


def test_constant_and_bad_semantics():
    assert ran_with("constant", "as_written", 3) == [0.3] * 3
    assert ran_with("constant", "intended", 3) == [0.3] * 3
    with pytest.raises(ValueError):
        s.schedule("sqrt", "other")


def test_the_book_schedule_uses_the_object_its_plot_advanced():
    factor = s.Run(
        "factor",
        "custom",
        2.0,
        make=lambda: s.FactorScheduler(factor=0.9, stop_factor_lr=1e-2, base_lr=2.0),
        plot_calls=50,
    )
    assert ran_with(factor, "intended", 3) == pytest.approx([1.8, 1.62, 1.458])
    # after the book's 50-call plot the object already sits at its floor
    assert ran_with(factor, "as_written", 3) == pytest.approx([2.0, 0.01, 0.01])
