import time

import pandas as pd
import torch

from d2lrepro.core import environment, machines, reference, results
from d2lrepro.optimization import airfoil
from d2lrepro.pipeline import job

log = job.start(snakemake, threads=True)
p = snakemake.params
runs = pd.concat([pd.read_csv(path) for path in snakemake.input.runs], ignore_index=True)
# The sweep's runs were measured by their jobs, the ε sweep and the comparison by this one.
records = machines.read(snakemake.output.machines)
finals = runs.groupby(["setting", "seed"])["elapsed"].max()
log.info(
    "sweep: %d settings x %d seeds, %.2f s of training in all (evaluation excluded)",
    runs["setting"].nunique(),
    runs["seed"].nunique(),
    finals.sum(),
)
book = reference.load(snakemake.input.book_curves)
rows = [r | {"machine": machines.of_frame(runs)} for r in airfoil.summarize(runs, book)]
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
eps_runs = results.write_csv(eps_runs, snakemake.output.eps_runs)
results.write_metrics(rows, snakemake.output.metrics)
for name, group in runs.groupby("setting"):
    footer = environment.footer(machines.records_of(group, records, "the airfoil runs"))
    airfoil.draw_setting(group, snakemake.output[name], footer, book)
footer = environment.footer(machines.records_of(eps_runs, records, snakemake.output.eps_runs))
airfoil.draw_eps(eps_runs, snakemake.output.eps_sweep, footer)
