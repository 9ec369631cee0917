"""Scratch against torch.optim on the airfoil data, from one common start (``momentum.concise``,
``adagrad.concise``, ``rmsprop.concise``, ``adam.concise``, ``adadelta.concise.eps``): how far
apart the two implementations' loss curves lie, over a run and at one epoch."""

from __future__ import annotations

import math

import numpy as np

from d2lrepro.core.results import failed, iqr, metric
from d2lrepro.optimization.airfoil import hyper_of, train_airfoil


def both(setting: dict, data: dict, epochs: int, batch_size: int, eval_every: int, seed: int):
    """The scratch and the torch.optim run of torch setting ``setting``, from train_ch11's
    start (b = 0) on the same loss and data order: their histories, scratch first."""
    return [
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
        )
        for impl in ("scratch", "torch")
    ]


def divergence(frames, seed: int) -> str:
    """Which of the scratch and torch.optim runs ``frames`` (from :func:`both`) diverged, and
    where; "" where neither did. A diverged run's curve stops early, so no gap with it says
    how far the implementations part."""
    ended = [
        f"the {impl} run diverged at epoch {f['epoch'].iloc[-1]:.3g} (seed {seed})"
        for impl, f in zip(("scratch", "torch.optim"), frames)
        if f["diverged"].any()
    ]
    return "; ".join(ended)


def compare_implementation(
    name: str, setting: dict, data: dict, epochs: int, batch_size: int, eval_every: int, seed: int
) -> list[dict]:
    """Scratch vs torch.optim on one problem (same loss, data order and start: train_ch11's,
    b = 0), with the hyper-parameters of torch setting ``name``: the largest gap between their
    loss curves over ``epochs``."""
    frames = both(setting, data, epochs, batch_size, eval_every, seed)
    key, device = f"{name}.scratch_vs_torch_gap", str(data["features"].device)
    if why := divergence(frames, seed):
        return [failed(key, why, "|Δ|", device)]
    curves = [f["loss"].to_numpy() for f in frames]
    gap = float(np.max(np.abs(curves[0] - curves[1]))) if len(curves[0]) else math.nan
    return [metric(key, gap, "|Δ|", device)]


def compare_at_epoch(
    name: str,
    setting: dict,
    data: dict,
    epochs: int,
    batch_size: int,
    eval_every: int,
    seeds: list[int],
    epoch: float,
) -> list[dict]:
    """Scratch vs torch.optim from one start (as :func:`compare_implementation`), for each of
    ``seeds``: how far torch.optim's loss lies above the scratch one at the evaluation at
    ``epoch`` (below it: negative), as the median over the seeds
    (``{name}.scratch_vs_torch_gap_at_{epoch}``) and its IQR (``..._iqr``); both failed where
    a run diverged."""
    gaps, key = [], f"{name}.scratch_vs_torch_gap_at_{epoch:g}"
    device = str(data["features"].device)
    for seed in seeds:
        frames = both(setting, data, epochs, batch_size, eval_every, seed)
        if why := divergence(frames, seed):
            return [failed(key, why, device=device), failed(f"{key}_iqr", why, device=device)]
        at = [f.loc[np.isclose(f["epoch"], epoch), "loss"] for f in frames]
        gaps.append(at[1].iloc[0] - at[0].iloc[0] if all(len(a) for a in at) else math.nan)
    return [
        metric(key, float(np.median(gaps)), "", device),
        metric(f"{key}_iqr", iqr(gaps), "", device),
    ]
