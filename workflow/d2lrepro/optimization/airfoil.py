"""Airfoil optimizer sweeps: each setting over several seeds (summarized and plotted by
:mod:`d2lrepro.optimization.airfoil_summary`), for the airfoil claims of the optimizer
sections (``momentum.lr*``, ``momentum.concise``, ``adagrad.scratch_lr0.1``,
``adagrad.effective_lr``, ``adagrad.concise``, ``rmsprop.scratch``, ``rmsprop.concise``,
``adadelta.*``, ``adam.*``) and ``data.train_ch11.sec_per_epoch``, and Adagrad's step against
SGD's (``adagrad.cost``, :func:`step_cost`). Every run goes through
:func:`train_airfoil`, the loop of this code path: a new experiment on the airfoil data
reuses it."""

from __future__ import annotations

import itertools
import logging
import math
import socket
import time
from functools import partial
from typing import TYPE_CHECKING

import pandas as pd

from d2lrepro.core.results import exploded, metric

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
HYPER = ("lr", "momentum", "gamma", "rho")
# The book's concise loop trains on MSELoss (twice the gradient of its half squared error).
OBJECTIVE = {"scratch": "half_squared", "torch": "squared"}
# train_ch11's plot: ylim [0.22, 0.35]; the book's curves lack the points above its top.
BOOK_YLIM = (0.22, 0.35)
# Every gap the audits of the optimizers' state and steps record
# (:mod:`d2lrepro.optimization.audits`, which imports torch: the summary's job needs none), as
# columns of the runs, NaN where a run keeps no audit or its audit lacks the gap.
GAPS = ("state_gap", "step_gap", "s_gap", "delta_gap", "v_gap", "s_step_gap", "first_step_gap")
COLUMNS = ["epoch", "examples", "loss", "elapsed", "eff_lr", *GAPS, "diverged"]
# Where the book's airfoil loops start: train_ch11 from b = 0, train_concise_ch11 from
# nn.Linear's default bias.
BOOK_START = {"scratch": "ch11", "torch": "concise"}
CODE = {"scratch": "from scratch", "torch": "torch.optim"}  # a setting's code, in notes


def squared_loss(y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The book's squared_loss: half the squared error, per example."""
    return (y_hat - y.reshape(y_hat.shape)) ** 2 / 2


def airfoil_start(dim: int, generator: torch.Generator, start: str) -> list[torch.Tensor]:
    """The weights w ~ N(0, 0.01^2) (d x 1) and bias b a run starts from: b = 0 as train_ch11
    ('ch11'), or nn.Linear's default bias U(±1/√d), which train_concise_ch11 keeps ('concise')."""
    import torch  # here and in train_airfoil, not at the top: the summary's job needs none

    if start not in ("ch11", "concise"):
        raise ValueError(f"start must be 'ch11' or 'concise', not {start!r}")
    w = torch.normal(0.0, 0.01, size=(dim, 1), generator=generator)
    b = torch.zeros(1)
    if start == "concise":
        b.uniform_(-(dim**-0.5), dim**-0.5, generator=generator)
    return [w.requires_grad_(), b.requires_grad_()]


def train_airfoil(
    optimizer: str,
    hyper: dict,
    features: torch.Tensor,
    labels: torch.Tensor,
    epochs: int,
    batch_size: int = 10,
    seed: int = 0,
    implementation: str = "scratch",
    eval_every: int = 200,
    objective: str = "half_squared",
    start: str | None = None,
    audit: bool = False,
) -> pd.DataFrame:
    """The book's train_ch11 ('scratch') and train_concise_ch11 ('torch') as one loop: the
    loop of the airfoil code path, the one the book times.

    Linear regression from :func:`airfoil_start` (``start``; by default the book's for the
    implementation), as :func:`linear_model` computes it, over minibatches from d2l.load_array's
    DataLoader (a TensorDataset reshuffled each epoch). Whenever the examples seen reach a
    multiple of eval_every, the half squared error over all the data is recorded (as the book
    plots it) with the training time so far (evaluation excluded). A loss that explodes
    (:func:`~d2lrepro.core.results.exploded`) ends the run, flagged in the column 'diverged'.

    The objective is the book's mean half squared error ('half_squared', train_ch11's
    squared_loss) or its mean squared error ('squared': train_concise_ch11's MSELoss, twice the
    gradient). The seed drives the initialisation and the shuffles, so a run is repeatable bit
    for bit; with start='ch11' both implementations start from the same w, b, so that they can be
    compared from one start. ``audit``: audit the optimizer's state and steps where an audit is
    kept (:func:`updater`); such a run is not timed (its 'elapsed' is NaN), as the audit's float64
    copies weigh on the steps beside them.
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(seed)
    start = start or BOOK_START.get(implementation, "ch11")
    net, params = linear_model(airfoil_start(features.shape[1], generator, start), implementation)
    loss = objective_of(objective)
    update, kept, eff_lr = updater(optimizer, hyper, params, implementation, audit)
    loader = DataLoader(
        TensorDataset(features, labels), batch_size, shuffle=True, generator=generator
    )
    rows, n, elapsed, diverged = [], 0, 0.0, False
    clock = time.perf_counter()
    for X, y in (batch for _ in range(epochs) for batch in loader):
        loss(net(X), y).backward()
        update()
        n += len(y)
        if n % eval_every == 0:
            elapsed += time.perf_counter() - clock
            with torch.no_grad():
                value = squared_loss(net(features), labels).mean().item()
            rows.append(
                {
                    "epoch": n / len(labels),
                    "examples": n,
                    "loss": value,
                    "elapsed": math.nan if kept else elapsed,
                    "eff_lr": eff_lr(),
                    **(kept.take() if kept else {}),
                }
            )
            if exploded(value, rows[0]["loss"]):
                diverged = True
                break
            clock = time.perf_counter()
    return pd.DataFrame(rows, columns=COLUMNS[:-1]).assign(diverged=diverged)


def linear_model(params: list, implementation: str):
    """The model a run trains on ``params`` (w, b) and the parameters its optimizer steps:
    train_ch11's linreg, X @ w + b on w and b themselves ('scratch'), or train_concise_ch11's
    nn.Sequential(nn.Linear) holding the same start, its weight w's transpose ('torch')."""
    import torch

    if implementation == "scratch":
        w, b = params
        return (lambda X: torch.matmul(X, w) + b), params
    if implementation != "torch":
        raise ValueError(f"implementation must be 'scratch' or 'torch', not {implementation!r}")
    net = torch.nn.Sequential(torch.nn.Linear(len(params[0]), 1))
    with torch.no_grad():
        net[0].weight.copy_(params[0].T)
        net[0].bias.copy_(params[1])
    return net, [net[0].weight, net[0].bias]


def objective_of(name: str):
    """The minibatch objective ``name``: 'half_squared', train_ch11's squared_loss(...).mean(),
    or 'squared', train_concise_ch11's MSELoss(reduction='none')(...).mean()."""
    import torch

    if name == "half_squared":
        return lambda y_hat, y: squared_loss(y_hat, y).mean()
    if name == "squared":
        mse = torch.nn.MSELoss(reduction="none")
        return lambda y_hat, y: mse(y_hat, y.reshape(y_hat.shape)).mean()
    raise ValueError(f"objective must be 'half_squared' or 'squared', not {name!r}")


def updater(optimizer: str, hyper: dict, params: list, implementation: str, audit: bool):
    """One step of ``optimizer`` on ``params`` as ``implementation`` takes it ('scratch': the
    chapter's update rules; 'torch': torch.optim); with, if ``audit``, the audit of the weights'
    state and steps where one is kept (:func:`~d2lrepro.optimization.audits.audit_for`:
    from-scratch Adagrad, Adadelta, Adam and Yogi, torch.optim's Adadelta and Adam; None
    otherwise) and the weights' effective lr so far (NaN but for from-scratch Adagrad)."""
    from d2lrepro.optimization.audits import TORCH_STATE, audit_for
    from d2lrepro.optimization.optimizers import (
        adagrad_effective_lr,
        init_states,
        step,
        torch_optimizer,
    )

    if implementation == "torch":
        trainer = torch_optimizer(optimizer, params, hyper)

        def raw_step() -> None:
            trainer.step()
            trainer.zero_grad()

        def state() -> dict:
            kept = trainer.state[params[0]]
            return {book: kept[name] for book, name in TORCH_STATE[optimizer].items()}

    elif implementation == "scratch":
        states = init_states(optimizer, params)
        raw_step = partial(step, optimizer, params, states, hyper)

        def state() -> dict:
            return states[0]

    else:
        raise ValueError(f"implementation must be 'scratch' or 'torch', not {implementation!r}")

    def eff_lr() -> float:
        if optimizer == "adagrad" and implementation == "scratch":
            return adagrad_effective_lr(hyper["lr"], states[0]["s"])
        return math.nan

    kept = audit_for(optimizer, implementation, hyper, params[0]) if audit else None
    if kept is None:
        return raw_step, None, eff_lr

    def audited() -> None:
        kept.before()
        raw_step()
        kept.after(state())

    return audited, kept, eff_lr


def hyper_of(setting: dict) -> dict:
    return {k: setting[k] for k in HYPER if k in setting and setting[k] is not None}


def run_sweep(
    settings: dict, data: dict, seeds, epochs: dict, batch_size: int, eval_every: int
) -> dict[str, pd.DataFrame]:
    """Every setting of ``settings`` (name -> setting) over every seed, as one table per
    setting: a row per evaluation point, with the host it ran on and the device, that of the
    data (the CPU: the book trains these small models there, GPU or not). The settings take
    turns within each seed (seed 0 of each, then seed 1, ...), so that a load that changes
    while they run falls on every setting alike and widens its spread over seeds rather than
    moving one setting's times against another's. Each run is timed unaudited; a setting whose
    optimizer keeps an audit runs its seed again, audited (:func:`audited_gaps`)."""
    frames = {name: [] for name in settings}
    for seed in seeds:
        for name, setting in settings.items():
            implementation = setting["implementation"]
            run = partial(
                train_airfoil,
                setting["optimizer"],
                hyper_of(setting),
                data["features"],
                data["labels"],
                epochs=epochs[implementation],
                batch_size=batch_size,
                seed=seed,
                implementation=implementation,
                eval_every=eval_every,
                objective=OBJECTIVE[implementation],
            )
            frame = audited_gaps(run(), run, (setting["optimizer"], implementation))
            end = frame.iloc[-1] if len(frame) else pd.Series({"loss": math.nan, "examples": 0})
            diverged = " (diverged)" if frame["diverged"].any() else ""
            log.info(
                f"{name} seed {seed}: final loss {end.loss:.4f} after {end.examples} examples,"
                f" {end.get('elapsed', 0.0):.3f} s training{diverged}"
            )
            frames[name].append(
                frame.assign(
                    setting=name,
                    implementation=implementation,
                    optimizer=setting["optimizer"],
                    seed=seed,
                    host=socket.gethostname(),
                    device=str(data["features"].device),
                    **hyper_of(setting),
                )
            )
    return {name: pd.concat(found, ignore_index=True) for name, found in frames.items()}


def audited_gaps(timed: pd.DataFrame, run, optimizer: tuple[str, str]) -> pd.DataFrame:
    """The timed run ``timed`` with the gaps of the same run audited, ``run(audit=True)``, where
    ``optimizer`` (its name and implementation) keeps an audit: the seed fixes every number, so
    the audited run must record the same losses, or the audit changed what it audits."""
    from d2lrepro.optimization.audits import AUDITS

    if optimizer not in AUDITS:
        return timed
    audited = run(audit=True)
    if not timed["loss"].equals(audited["loss"]):
        raise RuntimeError(f"auditing {optimizer} changed its run's losses")
    return timed.assign(**{gap: audited[gap] for gap in GAPS})


def step_cost(data: dict, lrs: dict, batch_size: int, seed: int) -> list[dict]:
    """How much a from-scratch Adagrad step costs against the book's minibatch SGD step, for
    ``adagrad.cost``: each step as train_ch11 takes it (a minibatch's loss, its backward, the
    update), both from one start over the same minibatches of one shuffle, cycled; blocks of
    steps of each timed in alternation (:func:`~d2lrepro.core.timing.paired_ratio`), on the
    CPU, where the book trains these models. ``lrs``: each optimizer's lr. The ratio's median
    and IQR over the rounds."""
    import torch

    from d2lrepro.core.timing import paired_ratio
    from d2lrepro.optimization.optimizers import init_states, step

    features, labels = data["features"], data["labels"]
    generator = torch.Generator().manual_seed(seed)
    start = airfoil_start(features.shape[1], generator, "ch11")
    order = torch.randperm(len(labels), generator=generator).split(batch_size)

    def stepper(optimizer: str):
        params = [p.detach().clone().requires_grad_() for p in start]
        w, b = params
        hyper = {"lr": lrs[optimizer]}
        update = partial(step, optimizer, params, init_states(optimizer, params), hyper)
        batches = itertools.cycle(order)

        def one_step() -> None:
            batch = next(batches)
            squared_loss(features[batch] @ w + b, labels[batch]).mean().backward()
            update()

        return one_step

    # blocks of 0.1 s, not 0.02: on a loaded 2-core machine shorter ones spread over 2x and more
    ratio = paired_ratio(
        stepper("adagrad"), stepper("sgd"), features.device, block_s=0.1, max_rounds=15
    )
    log.info("Adagrad's step over SGD's: %.3f (IQR %.3f)", ratio["median"], ratio["iqr"])
    device = str(features.device)
    return [
        metric("adagrad.step_over_sgd", ratio["median"], "x", device),
        metric("adagrad.step_over_sgd_iqr", ratio["iqr"], "x", device),
    ]
