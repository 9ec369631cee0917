"""Airfoil optimizer sweeps: each setting over several seeds, summaries and the book's plots."""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd

from . import optimizers, plotting, reference
from .results import failed, metric

log = logging.getLogger(__name__)
HYPER = ("lr", "momentum", "gamma", "rho")
# The book's concise loop trains on MSELoss (twice the gradient of its half squared error).
OBJECTIVE = {"scratch": "half_squared", "torch": "squared"}


def hyper_of(setting: dict) -> dict:
    return {k: setting[k] for k in HYPER if k in setting and setting[k] is not None}


def run_setting(
    name: str, setting: dict, data: dict, seeds, epochs: dict, batch_size: int, eval_every: int
) -> pd.DataFrame:
    """One setting over every seed: one row per evaluation point."""
    implementation = setting["implementation"]
    frames = []
    for seed in seeds:
        frame = optimizers.train_airfoil(
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
        last = frame.iloc[-1] if len(frame) else None
        log.info(
            "%s seed %d: final loss %s after %s examples, %.3f s training%s",
            name,
            seed,
            f"{last.loss:.4f}" if last is not None else "-",
            last.examples if last is not None else 0,
            last.elapsed if last is not None else 0.0,
            " (diverged)" if frame["diverged"].any() else "",
        )
        frames.append(
            frame.assign(
                setting=name,
                implementation=implementation,
                optimizer=setting["optimizer"],
                seed=seed,
                **hyper_of(setting),
            )
        )
    return pd.concat(frames, ignore_index=True)


def summarize(runs: pd.DataFrame, book: pd.DataFrame) -> list[dict]:
    """Per setting: median final loss over seeds, its spread, sec/epoch, divergence, and how
    far the curve's range over seeds strays from the band of the book's editions
    (``curve_excess``);
    the losses of a setting where a seed diverged are failed, not numbers to compare."""
    rows = []
    for name, group in runs.groupby("setting", sort=False):
        finals = group.loc[group.groupby("seed")["examples"].idxmax()]
        bad = group.groupby("seed")["diverged"].any()
        rows += [
            metric(f"{name}.sec_per_epoch", (finals["elapsed"] / finals["epoch"]).median(), "s"),
            metric(f"{name}.diverged_seeds", float(bad.sum())),
        ]
        if bad.any():
            why = f"{name}: seeds {list(bad[bad].index)} of {len(bad)} diverged"
            names = ("final_loss", "final_loss_range", "curve_excess")
            rows += [failed(f"{name}.{n}", why) for n in names]
        else:
            spread = group.groupby("epoch")["loss"].agg(["min", "max"])
            excess = reference.band_excess(
                book, name, "loss", spread.index, spread["min"], spread["max"]
            )
            rows += [
                metric(f"{name}.final_loss", finals["loss"].median()),
                metric(f"{name}.final_loss_range", np.ptp(finals["loss"].to_numpy())),
                metric(f"{name}.curve_excess", excess),
            ]
            if "eff_lr" in group and group["eff_lr"].notna().all():
                slopes = [
                    decay_exponent(r["examples"], r["eff_lr"]) for _, r in group.groupby("seed")
                ]
                rows.append(metric(f"{name}.eff_lr_slope", float(np.median(slopes))))
    per_epoch = {r["metric"]: r["value"] for r in rows if r["metric"].endswith(".sec_per_epoch")}
    slowest = max(per_epoch, key=per_epoch.get)
    rows.append(metric("airfoil.slowest_sec_per_epoch", per_epoch[slowest], "s", note=slowest))
    return rows


def decay_exponent(steps, values) -> float:
    """The slope of log ``values`` against log ``steps`` over the second half of the points:
    -0.5 for a quantity that decays as t^-1/2 once the start is forgotten."""
    half = len(steps) // 2
    return float(np.polyfit(np.log(steps[half:]), np.log(values[half:]), 1)[0])


def compare_implementations(
    data: dict, settings: dict, epochs: int, batch_size: int, eval_every: int, seed: int
) -> list[dict]:
    """Scratch vs torch.optim on one problem (same loss, init and data order): largest loss gap.

    One comparison per optimizer that has both, with the hyper-parameters of its torch setting.
    """
    rows = []
    for name, setting in settings.items():
        if setting["implementation"] != "torch":
            continue
        curves = [
            optimizers.train_airfoil(
                setting["optimizer"],
                hyper_of(setting),
                data["features"],
                data["labels"],
                epochs=epochs,
                batch_size=batch_size,
                seed=seed,
                implementation=impl,
                eval_every=eval_every,
            )["loss"].to_numpy()
            for impl in ("scratch", "torch")
        ]
        gap = float(np.max(np.abs(curves[0] - curves[1]))) if len(curves[0]) else math.nan
        rows.append(metric(f"{name}.scratch_vs_torch_gap", gap))
    return rows


def draw_setting(group: pd.DataFrame, path, footer: str, book: pd.DataFrame) -> None:
    """train_ch11's plot (loss vs epoch, ylim [0.22, 0.35]): median over seeds, band = range,
    with the book's curves (``book``: :func:`d2lrepro.reference.load`) in grey."""
    fig, ax = plotting.figure()
    plotting.seaborn().lineplot(
        group,
        x="epoch",
        y="loss",
        estimator="median",
        errorbar=("pi", 100),
        ax=ax,
        label="this run (median, range)",
    )
    reference.draw(ax, book, group["setting"].iloc[0], "loss")
    epochs = math.ceil(group["epoch"].max())
    ax.set(xlim=(0, epochs), ylim=(0.22, 0.35), xlabel="epoch", ylabel="loss")
    ax.legend(fontsize=6)
    ax.grid(True)
    plotting.save(fig, path, footer=footer)
