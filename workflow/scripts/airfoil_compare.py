from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

import torch

from d2lrepro.core import results
from d2lrepro.optimization import airfoil_compare
from d2lrepro.pipeline import job

log = job.start(snakemake, threads=True)
p = snakemake.params
data = torch.load(snakemake.input.data)
rows = []
for name, setting in p.settings.items():
    rows += airfoil_compare.compare_implementation(
        name, setting, data, p.epochs, p.batch_size, p.eval_every, p.seed
    )
    gap = rows[-1]
    log.info(
        "%s: scratch against torch.optim, largest loss gap %.3g %s", name, gap["value"], gap["note"]
    )
    if name in p.gap_at:
        rows += airfoil_compare.compare_at_epoch(
            name, setting, data, p.epochs, p.batch_size, p.eval_every, p.seeds, p.gap_at[name]
        )
results.write_metrics(rows, snakemake.output.metrics)
