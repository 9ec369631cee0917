"""Airfoil optimizer sweeps: each setting over several seeds, summaries and the book's plots,
for the airfoil claims of the optimizer sections (``momentum.lr*``, ``momentum.concise``,
``adagrad.scratch_lr0.1``, ``adagrad.effective_lr``, ``adagrad.concise``, ``rmsprop.scratch``,
``rmsprop.concise``, ``adadelta.*``, ``adam.*``) and ``data.train_ch11.sec_per_epoch``. Every
run goes through :func:`d2lrepro.optimization.optimizers.train_airfoil`, the loop of this code
path."""

from __future__ import annotations

import logging
import math
import socket

import numpy as np
import pandas as pd

from d2lrepro.core import plotting, reference
from d2lrepro.core.results import failed, iqr, metric, not_applicable, sign_test_p
from d2lrepro.optimization import optimizers

log = logging.getLogger(__name__)
HYPER = ("lr", "momentum", "gamma", "rho")
# The book's concise loop trains on MSELoss (twice the gradient of its half squared error).
OBJECTIVE = {"scratch": "half_squared", "torch": "squared"}
# train_ch11's plot: ylim [0.22, 0.35]; the book's curves lack the points above its top.
BOOK_YLIM = (0.22, 0.35)
# Final losses of the two ε variants closer than this (relative; about 8 float32 ulps) agree
# to the float32 precision of the loss: a tie, left out of the ε sweep's sign test.
TIE_RELATIVE = 1e-6


def hyper_of(setting: dict) -> dict:
    return {k: setting[k] for k in HYPER if k in setting and setting[k] is not None}


def run_setting(
    name: str, setting: dict, data: dict, seeds, epochs: dict, batch_size: int, eval_every: int
) -> pd.DataFrame:
    """One setting over every seed: one row per evaluation point, with the host it ran on (its
    times are compared with those of the other settings, which may run elsewhere)."""
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
                host=socket.gethostname(),
                **hyper_of(setting),
            )
        )
    return pd.concat(frames, ignore_index=True)


def summarize(runs: pd.DataFrame, book: pd.DataFrame) -> list[dict]:
    """Per setting: median final loss over seeds, its spread, sec/epoch (median and IQR over
    seeds), divergence, and how far the median curve over seeds strays from the band of the
    book's editions, its clipped top included (``curve_excess``); for from-scratch Adagrad the
    slope of its effective lr and the largest gaps of its state and steps from the gradients it
    was fed (``state_gap``, ``step_gap``: :class:`~d2lrepro.optimization.optimizers.AdagradAudit`,
    the worst over seeds and steps); the losses of a setting
    where a seed diverged are failed, not numbers to compare. Over the settings the book ran
    (those with a book curve): the slowest and fastest sec/epoch, not applicable where they
    ran on different hosts."""
    rows, per_epoch = [], {}
    for name, group in runs.groupby("setting", sort=False):
        finals = group.loc[group.groupby("seed")["examples"].idxmax()]
        seconds = finals["elapsed"] / finals["epoch"]
        per_epoch[name] = (seconds.median(), iqr(seconds))
        bad = group.groupby("seed")["diverged"].any()
        rows += [
            metric(f"{name}.sec_per_epoch", per_epoch[name][0], "s"),
            metric(f"{name}.sec_per_epoch_iqr", per_epoch[name][1], "s"),
            metric(f"{name}.diverged_seeds", float(bad.sum())),
        ]
        if bad.any():
            why = f"{name}: seeds {list(bad[bad].index)} of {len(bad)} diverged"
            names = ("final_loss", "final_loss_range", "curve_excess")
            if "eff_lr" in group and group["eff_lr"].notna().any():  # from-scratch Adagrad
                names += ("eff_lr_slope", "state_gap", "step_gap")
            rows += [failed(f"{name}.{n}", why) for n in names]
        else:
            median = group.groupby("epoch")["loss"].median()
            excess = reference.band_excess(
                book, name, "loss", median.index, median.to_numpy(), clip=BOOK_YLIM[1]
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
            for gap in ("state_gap", "step_gap"):  # the worst over every seed and step
                if gap in group and group[gap].notna().all():
                    rows.append(metric(f"{name}.{gap}", float(group[gap].max())))
    in_book = {n: v for n, v in per_epoch.items() if n in set(book["id"])} or per_epoch
    hosts = sorted(runs.loc[runs["setting"].isin(in_book), "host"].unique())
    if len(hosts) > 1:
        why = (
            f"the settings ran on different hosts ({', '.join(hosts)}), so their times compare"
            " the machines too; run every airfoil_run job on one node (locally, or on SLURM"
            " with --nodelist): seconds each"
        )
        ends = [
            f"airfoil.{e}_sec_per_epoch{s}" for e in ("slowest", "fastest") for s in ("", "_iqr")
        ]
        return rows + [not_applicable(name, why, "s") for name in ends]
    for end, pick in (("slowest", max), ("fastest", min)):
        name = pick(in_book, key=lambda n: in_book[n][0])
        rows += [
            metric(f"airfoil.{end}_sec_per_epoch", in_book[name][0], "s", note=name),
            metric(f"airfoil.{end}_sec_per_epoch_iqr", in_book[name][1], "s", note=name),
        ]
    return rows


def decay_exponent(steps, values) -> float:
    """The slope of log ``values`` against log ``steps`` over the second half of the points:
    -0.5 for a quantity that decays as t^-1/2 once the start is forgotten."""
    half = len(steps) // 2
    return float(np.polyfit(np.log(steps[half:]), np.log(values[half:]), 1)[0])


def compare_implementations(
    data: dict, settings: dict, epochs: int, batch_size: int, eval_every: int, seed: int
) -> list[dict]:
    """Scratch vs torch.optim on one problem (same loss, data order and start: train_ch11's,
    b = 0): the largest gap between their loss curves over ``epochs``.

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
                start="ch11",
            )["loss"].to_numpy()
            for impl in ("scratch", "torch")
        ]
        gap = float(np.max(np.abs(curves[0] - curves[1]))) if len(curves[0]) else math.nan
        rows.append(metric(f"{name}.scratch_vs_torch_gap", gap))
    return rows


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
    ax.legend(fontsize=6)
    ax.grid(True)
    plotting.save(fig, path, footer=footer)


def adam_variant(inside: bool) -> str:
    """The book's from-scratch Adam with ε outside the square root (1 / (√ŝ + ε), the book's
    code) or inside it (1 / √(ŝ + ε)); ε itself is a hyper-parameter of both."""
    return "adam_eps_inside" if inside else "adam"


def eps_sweep(
    data: dict, eps: list, seeds, lrs: list, epochs: int, batch_size: int, eval_every: int
) -> pd.DataFrame:
    """Final airfoil loss of Adam from scratch with ε outside and inside the square root, at
    each ε, lr and seed; both variants of a seed start from the same init and data order."""
    rows = []
    for e in eps:
        for lr in lrs:
            for inside in (False, True):
                for seed in seeds:
                    frame = optimizers.train_airfoil(
                        adam_variant(inside),
                        {"lr": lr, "eps": e},
                        data["features"],
                        data["labels"],
                        epochs=epochs,
                        batch_size=batch_size,
                        seed=seed,
                        eval_every=eval_every,
                    )
                    final = frame["loss"].iloc[-1] if len(frame) else math.nan
                    if frame["diverged"].any():
                        final = math.nan
                    where = "inside" if inside else "outside"
                    rows.append(
                        {"eps": e, "lr": lr, "seed": seed, "variant": where, "final_loss": final}
                    )
    return pd.DataFrame(rows)


def best_over_lr(finals: pd.DataFrame) -> pd.DataFrame:
    """Each variant at its best lr: per (ε, seed, variant) of :func:`eps_sweep`, the lowest
    final loss over the lr grid and the lr that gave it. A run that diverged counts as the
    worst lr; the loss is NaN only where every lr diverged."""
    ranked = finals.reset_index(drop=True)
    ranked["rank"] = ranked["final_loss"].fillna(math.inf)
    best = ranked.loc[ranked.groupby(["eps", "seed", "variant"])["rank"].idxmin()]
    return best.drop(columns="rank").reset_index(drop=True)


def eps_metrics(finals: pd.DataFrame) -> list[dict]:
    """Each variant at its best lr (:func:`best_over_lr`: with one lr the setting fixes the
    effective step, which ε inside or outside the root changes), then one vote per seed (its
    runs at neighbouring ε share init, data order and nearly the whole trajectory, so they are
    not independent): the sign of the seed's median gap over the ε values where the two
    variants' best losses differ beyond :data:`TIE_RELATIVE`. The seeds where ε outside ends
    lower, those where ε inside does, and the one-sided sign-test p-value of ε outside ending
    lower more often; a variant that diverged at every lr fails the sweep."""
    best = best_over_lr(finals)
    pairs = best.pivot(index=["eps", "seed"], columns="variant", values="final_loss")
    if pairs.isna().to_numpy().any():
        return [failed("adam.eps_sweep.sign_p", "a variant of the ε sweep diverged at every lr")]
    gap = pairs["inside"] - pairs["outside"]
    tie = gap.abs() <= TIE_RELATIVE * pairs["outside"]
    votes = gap[~tie].groupby(level="seed").median()
    outside, inside = int((votes > 0).sum()), int((votes < 0).sum())
    sign_p = sign_test_p(outside, outside + inside)
    seeds = pairs.index.get_level_values("seed").nunique()
    decided = sorted({f"{e:g}" for e, _ in gap[~tie].index}, key=float)
    lrs = sorted(finals["lr"].unique())
    edge = int(best["lr"].isin([lrs[0], lrs[-1]]).sum()) if len(lrs) > 1 else 0
    note = (
        f"each variant at its best of lr = {', '.join(f'{lr:g}' for lr in lrs)}"
        f" ({len(finals)} runs; the best lr at an end of that grid for {edge} of {len(best)});"
        f" ε outside ended lower for {outside} seeds, ε inside for {inside}, of {seeds} (each"
        " seed: the sign of its median gap over the ε where the variants differ beyond float32"
        f" precision); they differ at ε = {', '.join(decided) or 'none'}"
    )
    return [
        metric("adam.eps_sweep.seeds", seeds),
        metric("adam.eps_sweep.runs", len(finals)),
        metric("adam.eps_sweep.outside_lower", outside),
        metric("adam.eps_sweep.inside_lower", inside),
        metric("adam.eps_sweep.sign_p", sign_p, note=note),
    ]


def draw_eps(finals: pd.DataFrame, path, footer: str) -> None:
    """Per seed and ε, the best final loss over the lr grid (:func:`best_over_lr`) with ε
    inside minus with ε outside (above 0: ε outside ends lower); the line is the median over
    seeds."""
    best = best_over_lr(finals)
    pairs = best.pivot(index=["eps", "seed"], columns="variant", values="final_loss")
    gap = (pairs["inside"] - pairs["outside"]).rename("gap").reset_index()
    fig, ax = plotting.figure()
    median = gap.groupby("eps")["gap"].median()
    ax.plot(median.index, median.to_numpy(), "-o", markersize=3, label="median over seeds")
    ax.scatter(gap["eps"], gap["gap"], s=8, alpha=0.5, label="one seed")
    ax.axhline(0, color="0.55", linewidth=0.8)
    ax.set(xscale="log", xlabel="ε", ylabel="best loss(inside) − best loss(outside)")
    ax.set_yscale("symlog", linthresh=1e-6)  # the gaps span ulps at small ε to 1e-3
    ax.legend(fontsize=6)
    ax.grid(True)
    plotting.save(fig, path, footer=footer)
