"""What a training loop does to its optimizer's lr each epoch (d2lrepro.core.lr_hooks)."""

import pytest
import torch

from d2lrepro.core import lr_hooks


@pytest.fixture
def optimizer():
    """An SGD optimizer of two parameter groups, built with lr 0.5."""
    a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    return torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.5)


def lrs(optimizer) -> list[float]:
    return [group["lr"] for group in optimizer.param_groups]


def test_each_epoch_runs_with_its_lr_set_before_it(optimizer):
    epochs = lr_hooks.EpochLrs([0.3, 0.2, 0.05])
    assert epochs.initial_lr == 0.3
    epochs.start(optimizer)
    seen = []
    for epoch in range(3):
        epochs.before_epoch(optimizer, epoch)
        seen.append(lrs(optimizer))
        epochs.after_epoch(optimizer, epoch)
        assert lrs(optimizer) == seen[-1]  # nothing changes after the epoch
    assert seen == [[0.3, 0.3], [0.2, 0.2], [0.05, 0.05]]


def test_the_base_schedule_leaves_the_lr_alone(optimizer):
    constant = lr_hooks.Schedule(0.5)
    assert constant.initial_lr == 0.5
    constant.start(optimizer)
    for epoch in range(3):
        constant.before_epoch(optimizer, epoch)
        constant.after_epoch(optimizer, epoch)
    assert lrs(optimizer) == [0.5, 0.5]


def test_set_lr_sets_every_group_and_no_lrs_start_at_zero(optimizer):
    lr_hooks.set_lr(optimizer, 1)
    assert lrs(optimizer) == [1.0, 1.0] and all(type(lr) is float for lr in lrs(optimizer))
    assert lr_hooks.EpochLrs([]).initial_lr == 0.0
