from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

import torch

from d2lrepro.core import results
from d2lrepro.performance import asynchrony
from d2lrepro.pipeline import job

log = job.start(snakemake, gpus=True, threads=True)
log.info("asynchrony with %d threads: %s", snakemake.threads, snakemake.params.asynchrony)
rows = asynchrony.measure(snakemake.params.asynchrony, snakemake.params.seed)
rows.append(results.metric("threads", torch.get_num_threads()))
results.write_metrics(rows, snakemake.output.metrics)
