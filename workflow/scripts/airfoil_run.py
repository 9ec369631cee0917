import torch

from d2lrepro.core import results
from d2lrepro.optimization import airfoil
from d2lrepro.pipeline import job

log = job.start(snakemake, threads=True)
p = snakemake.params
log.info("%s: %s, seeds %s", p.name, p.setting, p.seeds)
runs = airfoil.run_setting(
    p.name,
    p.setting,
    torch.load(snakemake.input.data),
    p.seeds,
    p.epochs,
    p.batch_size,
    p.eval_every,
)
results.write_csv(runs.assign(threads=snakemake.threads), snakemake.output[0])
