"""Warm-up against a high learning rate (the study notes, §6.3; ``lrs.warmup_high_lr``): the sweep
of peak lrs, each run without and with a linear warm-up from the same weights
(:func:`d2lrepro.core.training.train`'s ``warmup_steps``), judged pair by pair."""

from __future__ import annotations

import logging

import pandas as pd

from d2lrepro.core import plotting, provenance
from d2lrepro.core.results import least_sign_p, metric, sign_test_p

# A run "trains" when it neither explodes nor dies: a LeNet whose ReLUs died predicts one
# class, 0.1 on the balanced test set; one that learns anything is far above twice that.
TRAINED_TEST_ACC = 0.2


def train_seeds(
    lr: float, variant: str, sweep: dict, data_path, log: logging.Logger
) -> pd.DataFrame:
    """Every seed of ``sweep`` (the config's ``warmup_sweep``) at peak lr ``lr``, without
    warm-up (``variant`` "none") or with a linear one ("linear"), each seed's LeNet from its
    own weights, on this job's device (its GPU, else the CPU): one row per epoch
    (:data:`~d2lrepro.core.training.COLUMNS`), labelled with the run, the device and torch's
    threads."""
    # Here, not at the top: they import torch, which the summary's job does not need.
    import torch

    from d2lrepro.core.data import load_data
    from d2lrepro.core.devices import device_for
    from d2lrepro.core.models import lenet
    from d2lrepro.core.training import train

    device = device_for(0, 1)
    warmup_steps = sweep["warmup_steps"] if variant == "linear" else 0
    fashion = load_data(data_path, sweep["train_subset"], sweep["test_subset"], device)
    runs = []
    for seed in sweep["seeds"]:
        log.info(
            "peak lr %g, warm-up over %d steps, seed %d, on %s", lr, warmup_steps, seed, device
        )
        history = train(
            lenet(seed=seed),
            fashion,
            sweep["epochs"],
            [lr] * sweep["epochs"],
            batch_size=sweep["batch_size"],
            device=device,
            seed=seed,
            log=log,
            warmup_steps=warmup_steps,
        )
        runs.append(history.assign(seed=seed))
    return pd.concat(runs, ignore_index=True).assign(
        peak_lr=lr,
        warmup=variant,
        warmup_steps=warmup_steps,
        device=str(device),
        threads=torch.get_num_threads(),
    )


def trained(runs: pd.DataFrame) -> pd.DataFrame:
    """Per variant, peak lr and seed of the warm-up sweep: whether the run trained (its last
    epoch did not diverge and reached test accuracy :data:`TRAINED_TEST_ACC`)."""
    last = runs.groupby(["warmup", "peak_lr", "seed"]).tail(1)
    trained = ~last["diverged"].astype(bool) & (last["test_acc"] >= TRAINED_TEST_ACC)
    return last.assign(trained=trained)[["warmup", "peak_lr", "seed", "test_acc", "trained"]]


def sweep_metrics(runs: pd.DataFrame) -> list[dict]:
    """Runs that fail without and with warm-up; the (lr, seed) pairs, which start from the
    same weights, that warm-up rescues and that it breaks, and the one-sided sign-test
    p-value of rescuing more than it breaks, and the least that test could give here (every
    pair whose run without warm-up failed rescued, none broken); per variant, the highest peak
    lr at which every seed trained (0 if none). The rows name the devices of the runs, not
    this job's."""
    table = trained(runs)
    device = provenance.devices_of(runs)
    pairs = table.pivot_table(index=["peak_lr", "seed"], columns="warmup", values="trained")
    pairs = pairs.astype(bool)
    rescued = int((pairs["linear"] & ~pairs["none"]).sum())
    broken = int((pairs["none"] & ~pairs["linear"]).sum())
    sign_p = sign_test_p(rescued, rescued + broken)
    highest = {}
    rows = []
    for variant, g in table.groupby("warmup"):
        every_seed = g.groupby("peak_lr")["trained"].all()
        highest[variant] = max(every_seed[every_seed].index, default=0.0)
        rows += [
            metric(f"warmup_sweep.{variant}.failed_runs", int((~g["trained"]).sum()), "", device),
            metric(f"warmup_sweep.{variant}.highest_lr", highest[variant], "", device),
        ]
    lr = {variant: f"{value:g}" if value else "none" for variant, value in highest.items()}
    note = (
        f"warm-up rescued {rescued} and broke {broken} of {len(pairs)} (lr, seed) pairs; the"
        f" highest peak lr at which every seed trained: {lr['none']} without warm-up,"
        f" {lr['linear']} with"
    )
    return rows + [
        metric("warmup_sweep.pairs", len(pairs), "", device),
        metric("warmup_sweep.rescued", rescued, "", device),
        metric("warmup_sweep.broken", broken, "", device),
        metric("warmup_sweep.sign_p", sign_p, "p", device, note),
        least_sign_p(
            "warmup_sweep.least_p",
            int((~pairs["none"]).sum()),
            "(lr, seed) pairs whose run without warm-up failed",
            "higher peak lrs (warmup_sweep.lrs) or more seeds (warmup_sweep.seeds) give more,"
            " each a pair of LeNet runs",
            device,
        ),
    ]


def draw_sweep(runs: pd.DataFrame, path, footer: str, scaled: list = ()) -> None:
    """Test accuracy after the sweep's epochs against the peak lr, each seed a point, the
    median a line, without and with warm-up; runs that exploded sit at 0. What the preset
    scaled (``scaled``) said in the panel and under it
    (:func:`~d2lrepro.core.plotting.mark_scaled`)."""
    table = trained(runs).fillna({"test_acc": 0.0})
    fig, ax = plotting.figure()
    for (variant, g), style in zip(table.groupby("warmup"), ("-o", "--s")):
        steps = int(runs.loc[runs["warmup"] == variant, "warmup_steps"].iloc[0])
        label = (
            f"linear warm-up over {steps} step{'s' if steps != 1 else ''}"
            if steps
            else "no warm-up"
        )
        median = g.groupby("peak_lr")["test_acc"].median()
        (line,) = ax.plot(median.index, median.values, style, label=label)
        ax.scatter(g["peak_lr"], g["test_acc"], s=8, color=line.get_color(), alpha=0.5)
    ax.axhline(TRAINED_TEST_ACC, color="grey", linestyle=":", linewidth=0.8)
    lrs = sorted(table["peak_lr"].unique())
    ax.set(
        xlabel="peak learning rate", ylabel="test accuracy (fraction)", xscale="log", ylim=(0, 1)
    )
    ax.set_xticks(lrs, [f"{lr:g}" for lr in lrs])
    ax.minorticks_off()
    plotting.legend_readable(ax)
    ax.grid(True)
    plotting.note(fig, plotting.mark_scaled(ax, scaled))
    plotting.save(fig, path, footer=footer)
