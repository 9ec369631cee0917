"""Mutation tests of the lr-schedule training claims at the book's scale, the only scale at
which these claims are judged: config.yaml's ``lr_schedules`` settings (all 60,000 images, 30
epochs, batch 256, its seeds), trained through the rule's own ``train_run``.

The multi-step claims (lrs.multifactor_train, its ``.intended`` and ``.curve``): the schedule
never applied, so the optimizer keeps its constructor's lr 0.5 (the book's code trains at 0.125,
the intended schedule at 0.5 then 0.25). lrs.sqrt_train and the curve claims of the constant,
square-root, cosine and warm-up runs: each with a small plausible mutation of its schedule (or,
for the constant run, of its test split). Every broken run must fail its claim. A curve claim
must also fail for the mutation, which can fail on any machine: a check the unbroken run
passes fails, or the mutation moves the test-accuracy curve away from the book's by more than
the claim's tolerance. The other claims are judged only where the unbroken
runs reproduce them (a mutation flips nothing else): elsewhere the test is skipped with the
verdict, which the report shows as a finding. Some 36 runs of 30 epochs, about 100 minutes on 2
CPU cores: the default test command leaves them out, ``pytest -m book_scale`` runs them.
"""

import logging

import pandas as pd
import pytest
import torch
import yaml

from conftest import (
    assert_not_reproduced,
    never_applied,
    shipped_claims,
    skip_unless_reproduced,
    this_machine,
)
from d2lrepro.core import data, reference
from d2lrepro.optimization import lr_schedules, schedulers
from d2lrepro.pipeline import checks, settings

pytestmark = pytest.mark.book_scale
HERE = this_machine()


@pytest.fixture(scope="module")
def book(repo) -> dict:
    """The lr-schedule settings of the book preset, which must be the book's full scale."""
    config = yaml.safe_load((repo / "config.yaml").read_text())
    lrs = settings.resolve({**config, "preset": "book"}).values["lr_schedules"]
    assert lrs["train_subset"] is None and lrs["test_subset"] is None, lrs
    return lrs


@pytest.fixture(scope="module")
def fashion(fashion_mnist_files, tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "fashion_mnist.pt"
    data.save(data.prepare_fashion_mnist(*fashion_mnist_files), path)
    return path


def trained(book: dict, fashion, run: str, semantics: str) -> pd.DataFrame:
    """Every seed of ``run`` under ``semantics``, as the lr_schedules_run rule trains it."""
    log = logging.getLogger("test.book_scale")
    return pd.concat(
        lr_schedules.train_run(
            run, semantics, seed, fashion, book["epochs"], book["batch_size"], None, None, log
        )
        for seed in book["seeds"]
    )


@pytest.fixture(scope="module")
def as_written(book, fashion):
    """Each unbroken run as the book's code runs it (every seed), trained when a test first
    asks for it."""
    runs = {}

    def run(name: str) -> pd.DataFrame:
        if name not in runs:
            runs[name] = trained(book, fashion, name, "as_written")
        return runs[name]

    return run


@pytest.fixture(scope="module")
def constant(as_written) -> pd.DataFrame:
    return as_written("constant")


@pytest.fixture(scope="module")
def intact(book, fashion, constant) -> pd.DataFrame:
    multistep = [trained(book, fashion, "multistep", s) for s in ("as_written", "intended")]
    return pd.concat([constant, *multistep])


@pytest.fixture(scope="module")
def never(book, fashion, constant) -> pd.DataFrame:
    """The runs with the multi-step schedule never applied, beside the intact constant run.
    Both semantics then train the same run (the constructor's lr, the same seed), trained once
    and labelled twice; the lr it held is checked to be 0.5 throughout."""
    with pytest.MonkeyPatch.context() as mp:
        never_applied(mp)
        multistep = trained(book, fashion, "multistep", "as_written")
    assert (multistep["lr"] == schedulers.RUNS["multistep"].initial_lr).all()
    return pd.concat([constant, multistep, multistep.assign(semantics="intended")])


def metrics(history: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(lr_schedules.training_metrics(history, reference.load()))


@pytest.mark.parametrize(
    "claim_id",
    ["lrs.multifactor_train", "lrs.multifactor_train.intended", "lrs.multifactor_train.curve"],
)
def test_a_multistep_schedule_never_applied_fails_its_claims(claim_id, intact, request):
    skip_unless_reproduced(claim_id, metrics(intact), HERE)
    # the mutated runs are trained only when there is something for them to show
    assert_not_reproduced(claim_id, metrics(request.getfixturevalue("never")), HERE)


# The other schedules' claims at the book's scale: lrs.sqrt_train, and the curve claims of the
# constant, square-root, cosine and warm-up runs. The unbroken runs each claim reads (every
# seed, as the book's code applies the schedule) and a small plausible mutation of what it is
# about; some 27 runs of 30 epochs, about 75 minutes on 2 CPU cores.


def sqrt_exponent_sign_lost(mp):
    """The square-root schedule as lr · (t + 1)^½: its lr climbs from 0.1 to 0.54."""
    mp.setattr(schedulers.SquareRootScheduler, "__call__", lambda self, t: self.lr * (t + 1) ** 0.5)


def sqrt_without_the_root(mp):
    """The square-root schedule as lr · (t + 1)^-1, the root left out: 0.0034 by epoch 30."""
    mp.setattr(schedulers.SquareRootScheduler, "__call__", lambda self, t: self.lr / (t + 1))


def cosine_ends_swapped(mp):
    """The cosine schedule from final_lr to base_lr: it climbs from 0.01 to 0.3 by step 20."""
    cosine = schedulers.CosineScheduler.__init__

    def swapped(self, max_update, base_lr=0.01, final_lr=0, **kw):
        cosine(self, max_update, base_lr=final_lr, final_lr=base_lr, **kw)

    mp.setattr(schedulers.CosineScheduler, "__init__", swapped)


def warmup_steps_an_order_too_many(mp):
    """The warm-up over 50 steps instead of 5: epoch 30 runs at 0.3 · 28/50, not 0.01."""
    cosine = schedulers.CosineScheduler.__init__

    def longer(self, max_update, *args, warmup_steps=0, **kw):
        cosine(self, max_update, *args, warmup_steps=10 * warmup_steps, **kw)

    mp.setattr(schedulers.CosineScheduler, "__init__", longer)


def train_images_as_test(raw: dict) -> dict:
    """The data with its test split taken from the training files (their first 10,000 images,
    the test set's size): the "test" accuracy is then accuracy on images the run trains on."""
    n = len(raw["test_labels"])
    return raw | {"test_images": raw["train_images"][:n], "test_labels": raw["train_labels"][:n]}


# claim, the run it is about, and the mutation that must fail it (None: the data's test split
# read from the training files).
MUTATIONS = {
    "lrs.sqrt_train": ("sqrt", sqrt_exponent_sign_lost),
    "lrs.baseline.curve": ("constant", None),
    "lrs.sqrt_train.curve": ("sqrt", sqrt_without_the_root),
    "lrs.cosine_train.curve": ("cosine", cosine_ends_swapped),
    "lrs.warmup_train.curve": ("warmup", warmup_steps_an_order_too_many),
}


@pytest.fixture(scope="module")
def test_from_train(fashion, tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "fashion_mnist_test_from_train.pt"
    data.save(train_images_as_test(torch.load(fashion, weights_only=True)), path)
    return path


def runs_read(claim_id: str) -> list[str]:
    """The runs whose metrics the claim's checks read."""
    read = shipped_claims()[claim_id]["checks"]
    return sorted({m.split(".")[0] for check in read for m in checks.metrics_of(check)})


def excess_by_epoch(history: pd.DataFrame) -> pd.Series:
    """How far the seeds' middle half of test accuracy lies from the editions' band at each of
    its epochs (the claim's curve_excess is the largest of these)."""
    low, high = reference.middle_half(history, "test_acc")
    book_id = lr_schedules.BOOK_CURVE_IDS[history["run"].iloc[0]]
    book = reference.load()
    return pd.Series(
        {
            e: reference.band_excess(book, book_id, "test_acc", [e], [low[e]], [high[e]])
            for e in low.index
        }
    )


def passing(claim_id: str, rows: pd.DataFrame) -> set[int]:
    """The claim's checks that ``rows`` pass, by their place in the ledger."""
    value = dict(zip(rows["metric"], rows["value"])).__getitem__
    read = shipped_claims()[claim_id]["checks"]
    return {i for i, check in enumerate(read) if checks.apply(check, value).passed}


@pytest.mark.parametrize("claim_id", list(MUTATIONS))
def test_a_schedule_broken_in_a_small_way_fails_its_claim(claim_id, book, as_written, request):
    """The broken run must fail the claim. A curve claim must fail for the mutation, which can
    fail whether or not the unbroken run reproduces: a check the unbroken run passes fails,
    or the test-accuracy curve moves away from the book's, at some epoch of the book's plot,
    by more than the claim's tolerance beyond where the unbroken curve lies (or the broken run
    diverges). lrs.sqrt_train is judged where its unbroken runs reproduce it."""
    run, mutation = MUTATIONS[claim_id]
    curve = claim_id.endswith(".curve")
    unbroken = metrics(pd.concat([as_written(r) for r in runs_read(claim_id)]))
    if not curve:
        skip_unless_reproduced(claim_id, unbroken, HERE)
    with pytest.MonkeyPatch.context() as mp:
        if mutation is None:
            broken = trained(book, request.getfixturevalue("test_from_train"), run, "as_written")
        else:
            mutation(mp)
            broken = trained(book, request.getfixturevalue("fashion"), run, "as_written")
    kept = [as_written(r) for r in runs_read(claim_id) if r != run]
    broken_metrics = metrics(pd.concat([*kept, broken]))
    assert_not_reproduced(claim_id, broken_metrics, HERE)
    if curve and not passing(claim_id, unbroken) - passing(claim_id, broken_metrics):
        if not broken["diverged"].any():
            read = shipped_claims()[claim_id]["checks"]
            tolerance = next(c["bound"] for c in read if c["metric"].endswith(".curve_excess"))
            moved = excess_by_epoch(broken) - excess_by_epoch(as_written(run))
            assert moved.max() > tolerance, f"{run}: further from the band by\n{moved}"
