"""The audits of the update rules: on float64 parameters the real rules leave gaps at float64
rounding, every gap an audit records is a column of the airfoil runs, and an audit says NaN
rather than a perfect zero where it saw no step."""

import math

import pytest
import torch

from d2lrepro.optimization import airfoil, audits
from d2lrepro.optimization import optimizers as opt

HYPER = {"lr": 0.01, "rho": 0.9}


def audited_run(optimizer: str, implementation: str, steps: int = 60):
    """``steps`` steps of ``optimizer`` on a float64 parameter fed random gradients whose size
    changes from step to step (so that Yogi's s moves both ways), through the airfoil loop's
    updater: the audit's gaps over them."""
    g = torch.Generator().manual_seed(0)
    p = torch.randn(5, 1, generator=g, dtype=torch.float64).requires_grad_()
    update, audit, _ = airfoil.updater(optimizer, HYPER, [p], implementation, audit=True)
    for t in range(steps):
        p.grad = torch.randn(5, 1, generator=g, dtype=torch.float64) * (1 + 3 * (t % 7 == 0))
        update()
    return audit.take()


@pytest.mark.parametrize("optimizer, implementation", sorted(audits.AUDITS))
def test_the_real_rules_leave_only_rounding(optimizer, implementation):
    gaps = audited_run(optimizer, implementation)
    assert set(gaps) <= set(airfoil.GAPS)
    assert all(gap < 1e-10 for gap in gaps.values()), gaps


def test_yogis_s_moves_both_ways_in_the_audited_run():
    """The audit's run exercises both signs of g² − s, so its s_step_gap judges each."""
    g = torch.Generator().manual_seed(0)
    p = torch.randn(5, 1, generator=g, dtype=torch.float64).requires_grad_()
    states = opt.init_states("yogi", [p])
    signs = set()
    for t in range(60):
        p.grad = torch.randn(5, 1, generator=g, dtype=torch.float64) * (1 + 3 * (t % 7 == 0))
        signs |= set(torch.sign(p.grad**2 - states[0]["s"]).flatten().tolist())
        opt.step("yogi", [p], states, HYPER)
    assert {-1.0, 1.0} <= signs


def test_an_audit_that_saw_no_step_reads_nan_not_a_perfect_zero():
    p = torch.zeros(3)
    for make in audits.AUDITS.values():
        assert all(math.isnan(gap) for gap in make(HYPER, p).take().values())


def test_adams_first_step_gap_is_kept_from_the_first_step():
    """first_step_gap judges the first step alone: later windows report it unchanged."""
    p = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    update, audit, _ = airfoil.updater("adam", HYPER, [p], "scratch", audit=True)
    p.grad = torch.tensor([0.5, -2e-3], dtype=torch.float64)
    update()
    first = audit.take()["first_step_gap"]
    assert first < 1e-12
    p.grad = torch.tensor([0.1, 0.1], dtype=torch.float64)
    update()
    assert audit.take()["first_step_gap"] == first
