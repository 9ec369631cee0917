import torch

from d2lrepro.core import devices, environment, logs, results
from d2lrepro.performance import autopar

log = logs.setup(snakemake.log[0])
# Before CUDA starts: this job's GPUs become its cuda:0, cuda:1, ...
devices.claim_gpus(snakemake.resources.gpu, log)
torch.set_num_threads(snakemake.threads)
log.info("automatic parallelism with %d threads: %s", snakemake.threads, snakemake.params.autopar)
rows = autopar.measure(snakemake.params.autopar, snakemake.params.seed)
rows.append(results.metric("threads", torch.get_num_threads()))
metrics = results.write_metrics(rows, snakemake.output.metrics)
footer = environment.footer(snakemake.input.environment, snakemake.threads)
autopar.plot_autopar(metrics, snakemake.output.figure, footer)
