"""Airfoil optimizer sweeps: each setting over several seeds, summaries and the book's plots,
for the airfoil claims of the optimizer sections (``momentum.lr*``, ``momentum.concise``,
``adagrad.scratch_lr0.1``, ``adagrad.effective_lr``, ``adagrad.concise``, ``rmsprop.scratch``,
``rmsprop.concise``, ``adadelta.*``, ``adam.*``) and ``data.train_ch11.sec_per_epoch``. Every
run goes through :func:`train_airfoil`, the loop of this code path: a new experiment on the
airfoil data reuses it."""

from __future__ import annotations

import logging
import math
import socket
import time
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from d2lrepro.core import machines, plotting, reference
from d2lrepro.core.results import exploded, failed, iqr, metric, not_applicable

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
HYPER = ("lr", "momentum", "gamma", "rho")
# The book's concise loop trains on MSELoss (twice the gradient of its half squared error).
OBJECTIVE = {"scratch": "half_squared", "torch": "squared"}
# train_ch11's plot: ylim [0.22, 0.35]; the book's curves lack the points above its top.
BOOK_YLIM = (0.22, 0.35)
COLUMNS = ["epoch", "examples", "loss", "elapsed", "eff_lr", "state_gap", "step_gap", "diverged"]
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
) -> pd.DataFrame:
    """The book's train_ch11 ('scratch') and train_concise_ch11 ('torch') as one loop: the
    loop of the airfoil code path.

    Linear regression X @ w + b, minimising the mean half squared error over minibatches of a
    fresh shuffle each epoch, from :func:`airfoil_start` (``start``; by default the book's for
    the implementation). Whenever the examples seen reach a multiple of eval_every, the loss over
    all the data is recorded with the training time so far (evaluation excluded). A loss that
    explodes (:func:`~d2lrepro.core.results.exploded`) ends the run, flagged in the column
    'diverged'.

    The objective is the book's half squared error ('half_squared', train_ch11) or the full
    squared error ('squared': the MSELoss of train_concise_ch11, twice the gradient); the
    recorded loss is always the half squared error, as the book plots it. The seed drives the
    initialisation and the shuffles, so a run is repeatable bit for bit; with start='ch11' both
    implementations start from the same w, b, so that they can be compared from one start.
    """
    import torch

    from d2lrepro.optimization.optimizers import (
        AdagradAudit,
        adagrad_effective_lr,
        init_states,
        step,
        torch_optimizer,
    )

    generator = torch.Generator().manual_seed(seed)
    start = start or BOOK_START.get(implementation, "ch11")
    params = airfoil_start(features.shape[1], generator, start)
    w, b = params
    audit = None
    if implementation == "scratch":
        states = init_states(optimizer, params)
        update = partial(step, optimizer, params, states, hyper)
        if optimizer == "adagrad":  # its weights' state and steps, checked outside the timer
            audit, adagrad_update = AdagradAudit(hyper["lr"], w), update

            def update():
                nonlocal untimed
                t0 = time.perf_counter()
                audit.before()
                t1 = time.perf_counter()
                adagrad_update()
                t2 = time.perf_counter()
                audit.after(states[0]["s"])
                untimed += (t1 - t0) + (time.perf_counter() - t2)

    elif implementation == "torch":
        trainer = torch_optimizer(optimizer, params, hyper)

        def update():
            trainer.step()
            trainer.zero_grad()

    else:
        raise ValueError(f"implementation must be 'scratch' or 'torch', not {implementation!r}")

    if objective not in ("half_squared", "squared"):
        raise ValueError(f"objective must be 'half_squared' or 'squared', not {objective!r}")
    scale = 2.0 if objective == "squared" else 1.0

    def loss(X, y):
        return squared_loss(X @ w + b, y).mean()

    num_examples = len(labels)
    # Lazy, so each epoch's shuffle is drawn when that epoch begins.
    batches = (
        batch
        for _ in range(epochs)
        for batch in torch.randperm(num_examples, generator=generator).split(batch_size)
    )
    rows, n, elapsed, diverged, untimed = [], 0, 0.0, False, 0.0
    start = time.perf_counter()
    for batch in batches:
        (scale * loss(features[batch], labels[batch])).backward()
        update()
        n += len(batch)
        if n % eval_every == 0:
            elapsed += time.perf_counter() - start - untimed
            untimed = 0.0
            with torch.no_grad():
                value = loss(features, labels).item()
            # From-scratch Adagrad's state: the weights' effective lr (NaN for the others).
            eff_lr = (
                adagrad_effective_lr(hyper["lr"], states[0]["s"])
                if implementation == "scratch" and optimizer == "adagrad"
                else math.nan
            )
            state_gap, step_gap = audit.take() if audit else (math.nan, math.nan)
            rows.append(
                {
                    "epoch": n / num_examples,
                    "examples": n,
                    "loss": value,
                    "elapsed": elapsed,
                    "eff_lr": eff_lr,
                    "state_gap": state_gap,
                    "step_gap": step_gap,
                }
            )
            if exploded(value, rows[0]["loss"]):
                diverged = True
                break
            start = time.perf_counter()
    return pd.DataFrame(rows, columns=COLUMNS[:-1]).assign(diverged=diverged)


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
    moving one setting's times against another's."""
    frames = {name: [] for name in settings}
    for seed in seeds:
        for name, setting in settings.items():
            implementation = setting["implementation"]
            frame = train_airfoil(
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


def summarize(runs: pd.DataFrame, book: pd.DataFrame) -> list[dict]:
    """Per setting: median final loss over seeds, its spread, sec/epoch (median and IQR over
    seeds), divergence, and how far the median curve over seeds strays from the band of the
    book's editions, its clipped top included (``curve_excess``); for from-scratch Adagrad the
    slope of its effective lr and the largest gaps of its state and steps from the gradients it
    was fed (``state_gap``, ``step_gap``: :class:`~d2lrepro.optimization.optimizers.AdagradAudit`,
    the worst over seeds and steps); a setting where a seed diverged is failed. Over the
    settings with a book curve: the slowest and fastest sec/epoch, noted with their setting and
    code ("adadelta.concise (torch.optim)"), not applicable where none ran or where they ran
    on different hosts. Each row names the devices of the runs it comes from."""
    rows, per_epoch = [], {}
    for name, group in runs.groupby("setting", sort=False):
        finals = group.loc[group.groupby("seed")["examples"].idxmax()]
        seconds = finals["elapsed"] / finals["epoch"]
        per_epoch[name] = (seconds.median(), iqr(seconds))
        bad = group.groupby("seed")["diverged"].any()
        device = machines.devices_of(group)
        rows += [
            metric(f"{name}.sec_per_epoch", per_epoch[name][0], "s", device),
            metric(f"{name}.sec_per_epoch_iqr", per_epoch[name][1], "s", device),
            metric(f"{name}.diverged_seeds", float(bad.sum()), device=device),
        ]
        if bad.any():
            why = f"{name}: seeds {list(bad[bad].index)} of {len(bad)} diverged"
            names = ("final_loss", "final_loss_range", "curve_excess")
            if "eff_lr" in group and group["eff_lr"].notna().any():  # from-scratch Adagrad
                names += ("eff_lr_slope", "state_gap", "step_gap")
            rows += [failed(f"{name}.{n}", why, device=device) for n in names]
        else:
            median = group.groupby("epoch")["loss"].median()
            excess = reference.band_excess(
                book, name, "loss", median.index, median.to_numpy(), clip=BOOK_YLIM[1]
            )
            rows += [
                metric(f"{name}.final_loss", finals["loss"].median(), device=device),
                metric(
                    f"{name}.final_loss_range", np.ptp(finals["loss"].to_numpy()), device=device
                ),
                metric(f"{name}.curve_excess", excess, "|Δ|", device),
            ]
            if "eff_lr" in group and group["eff_lr"].notna().all():
                slopes = [
                    decay_exponent(r["examples"], r["eff_lr"]) for _, r in group.groupby("seed")
                ]
                rows.append(metric(f"{name}.eff_lr_slope", float(np.median(slopes)), device=device))
            for gap in ("state_gap", "step_gap"):  # the worst over every seed and step
                if gap in group and group[gap].notna().all():
                    rows.append(metric(f"{name}.{gap}", float(group[gap].max()), "|Δ|", device))
    in_book = {n: v for n, v in per_epoch.items() if n in set(book["id"])}
    hosts = sorted(runs.loc[runs["setting"].isin(in_book), "host"].unique())
    ends = [f"airfoil.{e}_sec_per_epoch{s}" for e in ("slowest", "fastest") for s in ("", "_iqr")]
    if not in_book:
        why = "none of the settings the book ran (those with a book curve) ran here"
        return rows + [not_applicable(name, why, "s") for name in ends]
    if len(hosts) > 1:
        why = (
            f"the settings ran on different hosts ({', '.join(hosts)}), so their times compare"
            " the machines too; one airfoil_run job trains every setting on one machine, in"
            " seconds: rerun it"
        )
        return rows + [not_applicable(name, why, "s") for name in ends]
    device = machines.devices_of(runs[runs["setting"].isin(in_book)])
    code = runs.groupby("setting")["implementation"].first()
    for end, pick in (("slowest", max), ("fastest", min)):
        name = pick(in_book, key=lambda n: in_book[n][0])
        note = f"{name} ({CODE[code[name]]})"
        rows += [
            metric(f"airfoil.{end}_sec_per_epoch", in_book[name][0], "s", device, note),
            metric(f"airfoil.{end}_sec_per_epoch_iqr", in_book[name][1], "s", device, note),
        ]
    return rows


def decay_exponent(steps, values) -> float:
    """The slope of log ``values`` against log ``steps`` over the second half of the points:
    -0.5 for a quantity that decays as t^-1/2 once the start is forgotten."""
    half = len(steps) // 2
    return float(np.polyfit(np.log(steps[half:]), np.log(values[half:]), 1)[0])


def compare_implementation(
    name: str, setting: dict, data: dict, epochs: int, batch_size: int, eval_every: int, seed: int
) -> list[dict]:
    """Scratch vs torch.optim on one problem (same loss, data order and start: train_ch11's,
    b = 0), with the hyper-parameters of torch setting ``name``: the largest gap between their
    loss curves over ``epochs``."""
    curves = [
        train_airfoil(
            setting["optimizer"],
            hyper_of(setting),
            data["features"],
            data["labels"],
            epochs=epochs,
            batch_size=batch_size,
            seed=seed,
            implementation=impl,
            eval_every=eval_every,
            start="ch11",
        )["loss"].to_numpy()
        for impl in ("scratch", "torch")
    ]
    gap = float(np.max(np.abs(curves[0] - curves[1]))) if len(curves[0]) else math.nan
    return [metric(f"{name}.scratch_vs_torch_gap", gap, "|Δ|", str(data["features"].device))]


def draw_setting(group: pd.DataFrame, path, footer: str, book: pd.DataFrame) -> None:
    """train_ch11's plot (loss vs epoch, ylim [0.22, 0.35]): median over seeds, band = range,
    with the book's curves (``book``: :func:`d2lrepro.core.reference.load`) in grey."""
    fig, ax = plotting.figure()
    plotting.seaborn().lineplot(
        group,
        x="epoch",
        y="loss",
        estimator="median",
        errorbar=("pi", 100),
        ax=ax,
        label=f"this run (median, range of {group['seed'].nunique()} seeds)",
    )
    reference.draw(ax, book, group["setting"].iloc[0], "loss")
    epochs = math.ceil(group["epoch"].max())
    ax.set(xlim=(0, epochs), ylim=BOOK_YLIM, xlabel="epoch", ylabel="loss")
    plotting.legend_readable(ax)
    ax.grid(True)
    plotting.save(fig, path, footer=footer)
