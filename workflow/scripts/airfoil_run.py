from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

import torch

from d2lrepro.core import results
from d2lrepro.optimization import airfoil
from d2lrepro.pipeline import job

log = job.start(snakemake, threads=True)
p = snakemake.params
log.info("%d settings, seeds %s, taking turns within each seed", len(p.settings), p.seeds)
data = torch.load(snakemake.input.data)
runs = airfoil.run_sweep(p.settings, data, p.seeds, p.epochs, p.batch_size, p.eval_every)
for frame, out in zip(runs.values(), snakemake.output.runs, strict=True):
    results.write_csv(frame.assign(threads=snakemake.threads), out)
results.write_metrics(
    airfoil.step_cost(data, p.step_cost, p.batch_size, p.seeds[0]), snakemake.output.step_cost
)
