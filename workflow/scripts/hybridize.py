from pathlib import Path

import torch

from d2lrepro.core import devices, environment, logs, results
from d2lrepro.performance import hybridize

log = logs.setup(snakemake.log[0])
# Before CUDA starts: this job's GPUs become its cuda:0, cuda:1, ...
devices.claim_gpus(snakemake.resources.gpu, log)
torch.set_num_threads(snakemake.threads)
log.info("hybridize with %d threads: %s", snakemake.threads, snakemake.params.hybridize)
rows = hybridize.measure(
    snakemake.params.hybridize, snakemake.params.seed, Path(snakemake.output.model).parent
)
rows.append(results.metric("threads", torch.get_num_threads()))
metrics = results.write_metrics(rows, snakemake.output.metrics)
footer = environment.footer(snakemake.input.environment, snakemake.threads)
hybridize.plot_hybridization(metrics, snakemake.output.figure, footer)
