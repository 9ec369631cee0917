"""Adam's ε inside or outside the square root (``adam.eps_outside``): the book's from-scratch
Adam on the airfoil data with 1 / (√ŝ + ε), its code, and 1 / √(ŝ + ε), which the text says
works slightly worse, each at its best lr of a grid, at each ε and seed. One job per ε
(:func:`runs_at`); the summary gives each seed one vote in a sign test (:func:`eps_metrics`)
and draws the gaps (:func:`draw_eps`)."""

from __future__ import annotations

import math

import pandas as pd

from d2lrepro.core import plotting, provenance
from d2lrepro.core.results import failed, least_sign_p, metric, sign_test_p
from d2lrepro.optimization.airfoil import train_airfoil

# Final losses of the two ε variants closer than this (relative; about 8 float32 ulps) agree
# to the float32 precision of the loss: a tie, left out of the ε sweep's sign test.
TIE_RELATIVE = 1e-6


def adam_variant(inside: bool) -> str:
    """The book's from-scratch Adam with ε outside the square root (1 / (√ŝ + ε), the book's
    code) or inside it (1 / √(ŝ + ε)); ε itself is a hyper-parameter of both."""
    return "adam_eps_inside" if inside else "adam"


def runs_at(
    eps: float, data: dict, seeds, lrs: list, epochs: int, batch_size: int, eval_every: int
) -> pd.DataFrame:
    """Final airfoil loss of Adam from scratch with ε outside and inside the square root, at
    one ``eps``, each lr and seed (one point of the sweep, one job), on the data's device; both
    variants of a seed start from the same init and data order."""
    rows, device = [], str(data["features"].device)
    for lr in lrs:
        for inside in (False, True):
            for seed in seeds:
                frame = train_airfoil(
                    adam_variant(inside),
                    {"lr": lr, "eps": eps},
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
                    {"eps": eps, "lr": lr, "seed": seed, "variant": where, "final_loss": final}
                )
    return pd.DataFrame(rows, columns=["eps", "lr", "seed", "variant", "final_loss"]).assign(
        device=device
    )


def best_over_lr(finals: pd.DataFrame) -> pd.DataFrame:
    """Each variant at its best lr: per (ε, seed, variant) of :func:`runs_at`, the lowest
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
    lower more often; a variant that diverged at every lr fails the sweep. The rows name the
    devices of the runs."""
    best = best_over_lr(finals)
    pairs = best.pivot(index=["eps", "seed"], columns="variant", values="final_loss")
    device = provenance.devices_of(finals)
    if pairs.isna().to_numpy().any():
        why = "a variant of the ε sweep diverged at every lr"
        return [failed("adam.eps_outside.sign_p", why, "p", device)]
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
    favoured, by_eps = eps_sides(gap, tie)
    return [
        metric("adam.eps_outside.eps_outside_favoured", favoured["outside"], device=device),
        metric("adam.eps_outside.eps_inside_favoured", favoured["inside"], "", device, by_eps),
        metric("adam.eps_outside.seeds", seeds, device=device),
        metric("adam.eps_outside.runs", len(finals), device=device),
        metric("adam.eps_outside.outside_lower", outside, device=device),
        metric("adam.eps_outside.inside_lower", inside, device=device),
        metric("adam.eps_outside.sign_p", sign_p, "p", device, note),
        least_sign_p(
            "adam.eps_outside.least_p",
            outside + inside,
            "seeds (those whose two forms differ beyond float32 precision)",
            "more seeds (airfoil.adam_eps.seeds) give more, each a sweep of ε and lr",
            device,
        ),
    ]


def eps_sides(gap: pd.Series, tie: pd.Series) -> tuple[dict, str]:
    """At each ε, which form ended lower for more seeds (``gap``: ε inside minus ε outside,
    by (ε, seed); ``tie``: the two within float32 precision): how many ε favour each form,
    and a sentence that says, ε by ε, at how many seeds each form ended lower."""
    favoured, said = {"outside": 0, "inside": 0}, []
    for eps, at in gap.groupby(level="eps"):
        decided = at[~tie.loc[at.index]]
        outside, inside = int((decided > 0).sum()), int((decided < 0).sum())
        if outside != inside:
            favoured["outside" if outside > inside else "inside"] += 1
        parts = [f"outside lower at {outside}", f"inside at {inside}"]
        if len(at) > len(decided):
            parts.append(f"tied at {len(at) - len(decided)}")
        said.append(f"ε = {eps:g}: {', '.join(parts)} of {len(at)} seeds")
    return favoured, "; ".join(said)


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
    ax.set(xscale="log", xlabel="ε", ylabel="best final loss,\nε inside − ε outside")
    ax.set_yscale("symlog", linthresh=1e-6)  # the gaps span ulps at small ε to 1e-3
    plotting.legend_readable(ax)
    ax.grid(True)
    plotting.save(fig, path, footer=footer)
