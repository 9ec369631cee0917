import torch

from d2lrepro.core import results
from d2lrepro.optimization import airfoil
from d2lrepro.pipeline import job

log = job.start(snakemake, threads=True)
p = snakemake.params
data = torch.load(snakemake.input.data)
for (name, setting), out in zip(p.settings.items(), snakemake.output.runs, strict=True):
    log.info("%s: %s, seeds %s", name, setting, p.seeds)
    runs = airfoil.run_setting(name, setting, data, p.seeds, p.epochs, p.batch_size, p.eval_every)
    results.write_csv(runs.assign(threads=snakemake.threads), out)
