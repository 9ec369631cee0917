from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import results
from d2lrepro.optimization import warmup_sweep
from d2lrepro.pipeline import job

log = job.start(snakemake, gpus="shared", threads=True)
runs = warmup_sweep.train_seeds(
    snakemake.params.lr,
    snakemake.wildcards.warmup,
    snakemake.params.sweep,
    snakemake.input.data,
    log,
)
results.write_csv(runs, snakemake.output[0])
