"""What the airfoil sweep measured (rule ``airfoil_summary``), for the claims
:mod:`d2lrepro.optimization.airfoil` serves (``momentum.*``, ``adagrad.*``, ``rmsprop.*``,
``adadelta.*``, ``adam.*``, ``data.train_ch11.sec_per_epoch``): each setting's metrics over its
seeds, the slowest and fastest setting the book ran and the two parts of their ratio, the
scratch-against-torch comparisons, and train_ch11's plot of each setting beside the book's
curves."""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd

from d2lrepro.core import plotting, provenance, reference, results
from d2lrepro.core.results import failed, iqr, metric, not_applicable, run_spread, run_spread_names
from d2lrepro.optimization.airfoil import BOOK_YLIM, CODE, GAPS, HYPER

log = logging.getLogger(__name__)


def summarize(
    run_files: list,
    metric_files: list,
    records: dict[str, dict],
    book: pd.DataFrame,
    runs_out,
    metrics_out,
    figure_paths: dict,
) -> None:
    """The sweep's runs (``run_files``, one CSV per setting) as one table (``runs_out``), their
    metrics (:func:`setting_metrics`) with those of ``metric_files`` (the scratch-against-torch
    comparisons and Adagrad's step against SGD's, each naming its machine) in ``metrics_out``, and
    each setting's plot (``figure_paths[setting]``), its footer naming the machines of its
    runs (``records``)."""
    runs = pd.concat([pd.read_csv(path) for path in run_files], ignore_index=True)
    finals = runs.groupby(["setting", "seed"])["elapsed"].max()
    log.info(
        "sweep: %d settings x %d seeds, %.2f s of training in all (evaluation excluded)",
        runs["setting"].nunique(),
        runs["seed"].nunique(),
        finals.sum(),
    )
    rows = [r | {"machine": provenance.of_frame(runs)} for r in setting_metrics(runs, book)]
    rows += [row for path in metric_files for row in results.read_metrics(path).to_dict("records")]
    results.write_csv(runs, runs_out)
    results.write_metrics(rows, metrics_out)
    for name, group in runs.groupby("setting"):
        footer = provenance.footer(records, group, where="the airfoil runs")
        draw_setting(group, figure_paths[name], footer, book)


def setting_metrics(runs: pd.DataFrame, book: pd.DataFrame) -> list[dict]:
    """Per setting: median final loss over seeds, its quartiles, extremes and count
    (:data:`~d2lrepro.core.results.RUN_SPREAD`), sec/epoch
    (median and IQR over seeds), divergence, and how far the band of the book's editions, its
    clipped top included, lies from the seeds' curves (:func:`curve_excess`); for from-
    scratch Adagrad the slope of its effective lr; for an audited optimizer the largest gaps of
    its state and steps from the gradients it was fed (:mod:`~d2lrepro.optimization.audits`, the
    worst over seeds and steps); a setting where a seed diverged is failed. Over the settings
    with a book curve: the slowest and fastest sec/epoch, noted with their setting and code
    ("adadelta.concise (torch.optim)"), and the two parts of their ratio (:func:`ends_parts`), not
    applicable where none ran or where they ran on different hosts. Each row names the devices
    of the runs it comes from."""
    rows, per_epoch = [], {}
    for name, group in runs.groupby("setting", sort=False):
        finals = group.loc[group.groupby("seed")["examples"].idxmax()]
        seconds = finals["elapsed"] / finals["epoch"]
        per_epoch[name] = (seconds.median(), iqr(seconds))
        bad = group.groupby("seed")["diverged"].any()
        device = provenance.devices_of(group)
        gaps = [g for g in GAPS if g in group and group[g].notna().any()]  # its audit's
        rows += [
            metric(f"{name}.sec_per_epoch", per_epoch[name][0], "s", device),
            metric(f"{name}.sec_per_epoch_iqr", per_epoch[name][1], "s", device),
            metric(f"{name}.diverged_seeds", float(bad.sum()), device=device),
        ]
        if bad.any():
            why = f"{name}: seeds {list(bad[bad].index)} of {len(bad)} diverged"
            spread = run_spread_names("final_loss").values()
            names = ("final_loss", *spread, "curve_excess", "curve_excess_nearest_seed", *gaps)
            if "eff_lr" in group and group["eff_lr"].notna().any():  # from-scratch Adagrad
                names += ("eff_lr_slope",)
            rows += [failed(f"{name}.{n}", why, device=device) for n in names]
        else:
            excess = curve_excess(group, book, name)
            spread = run_spread(f"{name}.final_loss", finals["loss"])
            rows += [metric(f"{name}.final_loss", finals["loss"].median(), device=device)]
            rows += [metric(m, v, device=device) for m, v in spread.items()]
            rows += [metric(f"{name}.{m}", v, "|Δ|", device) for m, v in excess.items()]
            if "eff_lr" in group and group["eff_lr"].notna().all():
                slopes = [
                    decay_exponent(r["examples"], r["eff_lr"]) for _, r in group.groupby("seed")
                ]
                rows.append(metric(f"{name}.eff_lr_slope", float(np.median(slopes)), device=device))
            for gap in gaps:  # the worst over every seed and step
                if group[gap].notna().all():
                    rows.append(metric(f"{name}.{gap}", float(group[gap].max()), "|Δ|", device))
    in_book = {n: v for n, v in per_epoch.items() if n in set(book["id"])}
    hosts = sorted(runs.loc[runs["setting"].isin(in_book), "host"].unique())
    ends = {
        f"airfoil.{e}_sec_per_epoch{s}": "s" for e in ("slowest", "fastest") for s in ("", "_iqr")
    }
    ends |= {f"airfoil.{part}": "x" for part in ENDS_PARTS}
    if not in_book:
        why = "none of the settings the book ran (those with a book curve) ran here"
        return rows + [not_applicable(name, why, unit) for name, unit in ends.items()]
    if len(hosts) > 1:
        why = (
            f"the settings ran on different hosts ({', '.join(hosts)}), so their times compare"
            " the machines too; one airfoil_run job trains every setting on one machine, in"
            " seconds: rerun it"
        )
        return rows + [not_applicable(name, why, unit) for name, unit in ends.items()]
    book_runs = runs[runs["setting"].isin(in_book)]
    device = provenance.devices_of(book_runs)
    code = runs.groupby("setting")["implementation"].first()
    picked = {}
    for end, pick in (("slowest", max), ("fastest", min)):
        picked[end] = name = pick(in_book, key=lambda n: in_book[n][0])
        note = f"{name} ({CODE[code[name]]})"
        rows += [
            metric(f"airfoil.{end}_sec_per_epoch", in_book[name][0], "s", device, note),
            metric(f"airfoil.{end}_sec_per_epoch_iqr", in_book[name][1], "s", device, note),
        ]
    seconds = {name: median for name, (median, _) in in_book.items()}
    return rows + ends_parts(book_runs, seconds, picked["slowest"], picked["fastest"], device)


# The two factors of the slowest setting's sec/epoch over the fastest's: torch.optim against
# the from-scratch code of the same optimizer, and one from-scratch update rule against another.
ENDS_PARTS = ("torch_optim_part", "update_rule_part")


def ends_parts(
    runs: pd.DataFrame, seconds: dict[str, float], slowest: str, fastest: str, device: str
) -> list[dict]:
    """``slowest``'s sec/epoch over ``fastest``'s (``seconds``: the median over seeds by
    setting) as the product of two parts, each noted with the settings it divides. Each end
    that ran with torch.optim stands for its from-scratch twin (the setting that ran the same
    optimizer with the same configured hyper-parameters from scratch): the torch.optim part is
    each such end over its twin (slowest) or its twin over it (fastest), 1 where both ends ran
    from scratch; the update-rule part is the slowest end's from-scratch code over the
    fastest's. Not applicable, naming the end, where a torch.optim end has no twin."""
    hyper = [h for h in HYPER if h in runs]
    first = runs.groupby("setting")[["implementation", "optimizer", *hyper]].first()
    configured = {  # what a setting sets: its optimizer and the hyper-parameters it gives
        name: {k: v for k, v in row.items() if k != "implementation" and pd.notna(v)}
        for name, row in first.iterrows()
    }
    scratch = sorted(first.index[first["implementation"] == "scratch"])

    def from_scratch(name: str) -> str | None:
        if name in scratch:
            return name
        return next((s for s in scratch if configured[s] == configured[name]), None)

    twins = {end: from_scratch(end) for end in (slowest, fastest)}
    lacking = [end for end, twin in twins.items() if twin is None]
    if lacking:
        why = (
            f"{lacking[0]} ran with torch.optim and no setting ran its optimizer with the same"
            " hyper-parameters from scratch"
        )
        return [not_applicable(f"airfoil.{p}", why, "x", device) for p in ENDS_PARTS]
    pairs = [(slowest, twins[slowest]), (twins[fastest], fastest)]
    pairs = [(a, b) for a, b in pairs if a != b]
    code = math.prod(seconds[a] / seconds[b] for a, b in pairs)
    code_note = (
        "; ".join(f"{a} over {b}" for a, b in pairs)
        or "1 by definition: both ends ran from scratch"
    )
    rule = seconds[twins[slowest]] / seconds[twins[fastest]]
    rule_note = f"{twins[slowest]} over {twins[fastest]}"
    return [
        metric(f"airfoil.{ENDS_PARTS[0]}", code, "x", device, code_note),
        metric(f"airfoil.{ENDS_PARTS[1]}", rule, "x", device, rule_note),
    ]


def curve_excess(runs: pd.DataFrame, book: pd.DataFrame, name: str) -> dict[str, float]:
    """How far the band between the book's editions' loss curves of setting ``name`` lies from
    its ``runs``: :func:`~d2lrepro.core.reference.seeds_excess`, where an edition's curve that
    starts above the plot's top sets the band there to that top and above."""
    return reference.seeds_excess(book, name, "loss", runs, "loss", clip=BOOK_YLIM[1])


def decay_exponent(steps, values) -> float:
    """The slope of log ``values`` against log ``steps`` over the second half of the points:
    -0.5 for a quantity that decays as t^-1/2 once the start is forgotten."""
    half = len(steps) // 2
    return float(np.polyfit(np.log(steps[half:]), np.log(values[half:]), 1)[0])


def draw_setting(group: pd.DataFrame, path, footer: str, book: pd.DataFrame) -> None:
    """train_ch11's plot (loss vs epoch, ylim [0.22, 0.35]): median over seeds, with their
    range and, darker, their middle half (what the curve claims judge) as bands, and the book's
    curves (``book``: :func:`d2lrepro.core.reference.load`) in grey."""
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
    low, high = reference.middle_half(group, "loss")
    ax.fill_between(low.index, low, high, alpha=0.3, lw=0, label="their middle half")
    reference.draw(ax, book, group["setting"].iloc[0], "loss")
    epochs = math.ceil(group["epoch"].max())
    ax.set(xlim=(0, epochs), ylim=BOOK_YLIM, xlabel="epoch", ylabel="loss")
    plotting.legend_readable(ax)
    ax.grid(True)
    plotting.save(fig, path, footer=footer)
