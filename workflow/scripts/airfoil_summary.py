import time

import pandas as pd
import torch

from d2lrepro.core import environment, reference, results
from d2lrepro.optimization import airfoil
from d2lrepro.pipeline import job

log = job.start(snakemake, threads=True)
p = snakemake.params
runs = pd.concat([pd.read_csv(path) for path in snakemake.input.runs], ignore_index=True)
footer = environment.footer(snakemake.input.environment, int(runs["threads"].max()))
finals = runs.groupby(["setting", "seed"])["elapsed"].max()
log.info(
    "sweep: %d settings x %d seeds, %.2f s of training in all (evaluation excluded)",
    runs["setting"].nunique(),
    runs["seed"].nunique(),
    finals.sum(),
)
book = reference.load(snakemake.input.book_curves)
rows = airfoil.summarize(runs, book)
data = torch.load(snakemake.input.data)
rows += airfoil.compare_implementations(
    data,
    p.settings,
    p.compare_epochs,
    p.batch_size,
    p.eval_every,
    p.seed,
)
start = time.perf_counter()
eps_runs = airfoil.eps_sweep(
    data,
    p.eps_sweep["eps"],
    p.seeds,
    p.eps_sweep["lrs"],
    p.compare_epochs,
    p.batch_size,
    p.eval_every,
)
log.info("ε sweep: %d runs in %.1f s", len(eps_runs), time.perf_counter() - start)
rows += airfoil.eps_metrics(eps_runs)
results.write_csv(runs, snakemake.output.runs)
results.write_csv(eps_runs, snakemake.output.eps_runs)
results.write_metrics(rows, snakemake.output.metrics)
for name, group in runs.groupby("setting"):
    airfoil.draw_setting(group, snakemake.output[name], footer, book)
airfoil.draw_eps(eps_runs, snakemake.output.eps_sweep, footer)
