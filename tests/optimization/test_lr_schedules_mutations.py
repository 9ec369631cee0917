"""Mutation tests of the lr-scheduling claims: the implemented code broken in a small plausible
way, the metrics produced through the real training loop and summary at a tiny size."""

import logging

import pandas as pd
import pytest
import torch

from conftest import never_applied, synthetic, verdict_of
from d2lrepro.core import data, models, reference, training
from d2lrepro.optimization import lr_schedules, schedulers, warmup_sweep
from d2lrepro.pipeline import claims

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
    # Equal curves: an ordering whose seeds' spread reaches either side is inconclusive.
    for claim in ("lrs.cosine_train", "lrs.warmup_train"):
        assert verdict_of(claim, rows) in (claims.NOT_REPRODUCED, claims.INCONCLUSIVE)


@pytest.fixture(scope="module")
def data_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "fashion_mnist.pt"
    data.save(synthetic(n_train=512, n_test=128), path)
    return path


# A sweep that trains in seconds and in which warm-up rescues runs: 16 steps an epoch, three
# epochs, warm-up over the whole first epoch, three peak lrs, six seeds. Without warm-up 17 of
# its 18 runs fail; warm-up rescues 8 (lr, seed) pairs and breaks none (p = 1/256).
SWEEP = {"lrs": (0.7, 1.0, 1.4), "seeds": tuple(range(6)), "warmup_steps": 48}


def sweep_runs(data_path, variants=("none", "linear")) -> pd.DataFrame:
    """The warm-up sweep's runs as its rule makes them: each peak lr of SWEEP without and with
    a linear warm-up (``variants``), each seed from the same weights, on the CPU."""
    sweep = {"seeds": list(SWEEP["seeds"]), "warmup_steps": SWEEP["warmup_steps"]}
    sweep |= {"epochs": 3, "batch_size": 32, "train_subset": None, "test_subset": None}
    log = logging.getLogger("test")
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:  # as cpu_only, for a fixture of the module
        mp.setattr(torch.cuda, "is_available", lambda: False)
        mp.setattr(torch.cuda, "device_count", lambda: 0)
        mp.setenv("CUDA_VISIBLE_DEVICES", "")
        # One thread: such tiny batches run several times faster than on threads that wait
        # for each other on a shared machine.
        torch.set_num_threads(1)
        try:
            return pd.concat(
                warmup_sweep.train_seeds(lr, variant, sweep, data_path, log)
                for variant in variants
                for lr in SWEEP["lrs"]
            )
        finally:
            torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def unbroken(data_path) -> pd.DataFrame:
    return sweep_runs(data_path)


def test_an_unbroken_warmup_rescues_high_lr_runs(unbroken):
    """Without warm-up most runs fail; warm-up rescues enough (lr, seed) pairs and breaks few
    enough for the sign test (p < 0.05)."""
    rows = warmup_sweep.sweep_metrics(unbroken)
    assert verdict_of("lrs.warmup_high_lr", rows) == claims.REPRODUCED, values(rows)


def warm_up_over(monkeypatch, steps):
    """The mutation: the sweep's warm-up runs over ``steps(warmup_steps)`` steps instead."""
    real = training.train
    monkeypatch.setattr(  # the sweep imports train() when it trains
        training,
        "train",
        lambda *args, warmup_steps=0, **kw: real(*args, warmup_steps=steps(warmup_steps), **kw),
    )


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(lambda n: n // 10, id="warm-up-steps-an-order-too-few"),
        pytest.param(lambda n: 0, id="warm-up-never-applied"),
    ],
)
def test_a_broken_warmup_rescues_too_few_runs(data_path, unbroken, monkeypatch, steps):
    """A warm-up over a tenth of its steps, or none (its runs are then those without warm-up:
    p = 1), fails the claim that the unbroken sweep reproduces. The runs without warm-up do
    not change (each seed from the same weights, deterministic on the CPU): only the warm-up
    runs are trained again. So neither do the pairs warm-up could rescue (the 17 that failed
    without it), nor the least p the test could give (1/2^17): the claim stays within reach,
    and the broken warm-up misses it ("not reproduced", never "out of reach")."""
    intact = warmup_sweep.sweep_metrics(unbroken)
    assert verdict_of("lrs.warmup_high_lr", intact) == claims.REPRODUCED
    warm_up_over(monkeypatch, steps)
    without = unbroken[unbroken["warmup"] == "none"]
    rows = warmup_sweep.sweep_metrics(pd.concat([without, sweep_runs(data_path, ["linear"])]))
    least = values(intact)["warmup_sweep.least_p"]
    assert values(rows)["warmup_sweep.least_p"] == least == pytest.approx(0.5**17)
    assert verdict_of("lrs.warmup_high_lr", rows) == claims.NOT_REPRODUCED, values(rows)
