import torch

from d2lrepro.core import results
from d2lrepro.optimization import airfoil
from d2lrepro.pipeline import job

log = job.start(snakemake, threads=True)
p = snakemake.params
rows = airfoil.compare_implementation(
    p.name,
    p.setting,
    torch.load(snakemake.input.data),
    p.epochs,
    p.batch_size,
    p.eval_every,
    p.seed,
)
log.info("%s: scratch against torch.optim, largest loss gap %.3g", p.name, rows[0]["value"])
results.write_metrics(rows, snakemake.output.metrics)
