import math

import pytest

from d2lrepro import lr_schedulers as s


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


def test_book_semantics_are_one_epoch_late():
    cos = s.CosineScheduler(20, warmup_steps=5, base_lr=0.3, final_lr=0.01)
    intended = s.epoch_lrs("warmup", 30, "intended")
    book = s.epoch_lrs("warmup", 30, "book")
    assert len(book) == len(intended) == 30
    assert intended == pytest.approx(s.values(cos, 30))
    assert book[0] == 0.3  # the optimizer's constructor lr
    assert book[1] == 0.0  # scheduler(0): a whole epoch at lr 0
    assert book[1:] == pytest.approx(intended[:-1])

    sqrt = s.epoch_lrs("sqrt", 30, "book")
    assert sqrt[0] == pytest.approx(0.1) and sqrt[1] == pytest.approx(0.1)
    assert sqrt[2] == pytest.approx(0.1 / math.sqrt(2))
    assert s.epoch_lrs("sqrt", 30, "intended")[29] == pytest.approx(0.1 / math.sqrt(30))

    cosine = s.epoch_lrs("cosine", 30, "book")
    assert cosine[:2] == pytest.approx([0.3, 0.3])
    assert cosine[21:] == pytest.approx([0.01] * 9)


def test_multistep_semantics():
    assert s.epoch_lrs("multistep", 30, "book") == [0.125] * 30
    intended = s.epoch_lrs("multistep", 30, "intended")
    assert intended == [0.5] * 15 + [0.25] * 15


def test_constant_and_bad_semantics():
    assert s.epoch_lrs("constant", 3, "book") == [0.3] * 3
    assert s.epoch_lrs("constant", 3, "intended") == [0.3] * 3
    with pytest.raises(ValueError):
        s.epoch_lrs("sqrt", 3, "other")


def test_custom_epoch_lrs_replays_plot_for_stateful_schedulers():
    make = lambda: s.FactorScheduler(factor=0.9, stop_factor_lr=1e-2, base_lr=2.0)  # noqa: E731
    assert s.custom_epoch_lrs(make, 3, "intended") == pytest.approx([1.8, 1.62, 1.458])
    # after the book's 50-call plot the object already sits at its floor
    assert s.custom_epoch_lrs(make, 3, "book", initial_lr=2.0, plot_calls=50) == pytest.approx(
        [2.0, 0.01, 0.01]
    )
    assert s.custom_epoch_lrs(make, 3, "book", initial_lr=2.0) == pytest.approx([2.0, 1.8, 1.62])
