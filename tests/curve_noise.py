"""Benchmark: how the airfoil curve claims judge runs of this very code. For each setting with
a book curve, the config's seeds are the run; pairs of further seeds stand in for the book's
EN and ZH editions (each one run of the code): the pairs that part no further than the
tolerance (the book's editions' largest gap), drawn as the book draws them, up to its plot's
top. Prints, per setting, how many pairs were kept and the share of them that each measure
puts beyond the claim's tolerance: the seeds' median (a measure the claims do not use), their
middle half (``curve_excess``: beyond it, the verdict is not "reproduced") and the seed whose
curve lies nearest (``curve_excess_nearest_seed``: beyond it, "not reproduced"). Every miss
here is a false one: the stand-ins are runs of the same code. Then the other settings whose
seeds' middle half the setting's book curve accepts (and how many their median alone would):
what its curve check cannot tell apart. About 10 minutes on a 2-core machine at 60 pairs; it
asserts nothing.

    .venv/bin/python tests/curve_noise.py [--pairs 40] [--data path/to/airfoil_self_noise.dat]
        [settings ...]

"""

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from d2lrepro.core import data, reference
from d2lrepro.optimization import airfoil, airfoil_summary
from d2lrepro.pipeline import claims

REPO = Path(__file__).resolve().parents[1]
CURVES = ["curve_excess", "curve_excess_nearest_seed"]
MIRROR = Path(os.environ.get("D2L_DATA_MIRROR", REPO.parent / "shared" / "data"))


def tolerance(ledger: dict, claim_id: str) -> float:
    """The bound of ``claim_id``'s curve check in the ledger."""
    claim = next(c for s in ledger["sections"] for c in s["claims"] if c["id"] == claim_id)
    return next(c["bound"] for c in claim["checks"] if c.get("metric", "").endswith("curve_excess"))


def main() -> None:
    config = yaml.safe_load((REPO / "config.yaml").read_text())["airfoil"]
    with_curve = [n for n in config["settings"] if n in set(reference.load()["id"])]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("settings", nargs="*", default=with_curve)
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--data", type=Path, default=MIRROR / "airfoil" / "airfoil_self_noise.dat")
    args = parser.parse_args()
    airfoil_data = data.prepare_airfoil(args.data)
    seeds = config["seeds"]
    extra = range(max(seeds) + 1, max(seeds) + 1 + 2 * args.pairs)
    runs = airfoil.run_sweep(
        {name: config["settings"][name] for name in with_curve},
        airfoil_data,
        [*seeds, *extra],
        config["epochs"],
        config["batch_size"],
        config["eval_every"],
    )
    ours = {name: frame[frame["seed"].isin(seeds)] for name, frame in runs.items()}
    book, ledger = reference.load(), claims.load()
    print(f"{len(seeds)} seeds judged against {args.pairs} pairs of other seeds; share missed by")
    header = f"{'setting':24} {'tolerance':>9} {'pairs':>5} {'median':>7}"
    print(f"{header} {'middle half':>12} {'nearest':>8}  other settings passing its curve")
    for name in args.settings:
        bound = tolerance(ledger, name)
        missed = stand_in_misses(name, runs[name], ours[name], extra, bound)
        share = pd.DataFrame(missed, columns=[*CURVES, "median"]).mean()
        # The power it lacks: the settings whose runs the book's curve of this one accepts,
        # and how many of them their median alone would let pass.
        others = [other for other in with_curve if other != name]
        passing = [
            other
            for other in others
            if airfoil_summary.curve_excess(ours[other], book, name)["curve_excess"] <= bound
        ]
        by_median = sum(median_excess(ours[other], book, name) <= bound for other in others)
        print(
            f"{name:24} {bound:9.3f} {len(missed):5d} {share['median']:7.2f}"
            f" {share['curve_excess']:12.2f} {share['curve_excess_nearest_seed']:8.2f}"
            f"  {len(passing)} ({by_median} by the median): {' '.join(passing)}",
            flush=True,
        )


def median_excess(runs: pd.DataFrame, book: pd.DataFrame, name: str) -> float:
    """How far the band of ``book``'s curves of ``name`` lies from the median of ``runs``."""
    median = runs.groupby("epoch")["loss"].median()
    return reference.band_excess(
        book, name, "loss", median.index, median.to_numpy(), clip=airfoil.BOOK_YLIM[1]
    )


def stand_in_misses(name: str, runs: pd.DataFrame, ours: pd.DataFrame, extra, bound: float):
    """For each pair of the ``extra`` seeds of setting ``name``'s ``runs`` that stands in for
    the book's editions, whether each measure puts it beyond ``bound`` from ``ours`` (the
    config's seeds)."""
    missed = []
    for a, b in zip(extra[::2], extra[1::2], strict=True):
        pair = runs[runs["seed"].isin([a, b])]
        # As the book's plot: no point above its top, and two curves no further apart than
        # its editions' (the tolerance is their largest gap).
        if pair.groupby("epoch")["loss"].agg(np.ptp).max() > bound:
            continue
        pair = pair[pair["loss"] <= airfoil.BOOK_YLIM[1]]
        book = pd.DataFrame(
            {
                "id": name,
                "edition": pair["seed"].astype(str),
                "metric": "loss",
                "epoch": pair["epoch"],
                "value": pair["loss"],
            }
        )
        excess = airfoil_summary.curve_excess(ours, book, name)
        excess["median"] = median_excess(ours, book, name)
        missed.append({k: v > bound for k, v in excess.items()})
    return missed


if __name__ == "__main__":
    main()
