import torch

from d2lrepro.core import logs, results
from d2lrepro.optimization import airfoil

log = logs.setup(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
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
