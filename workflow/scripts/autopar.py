from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

import torch

from d2lrepro.core import provenance, results
from d2lrepro.performance import autopar
from d2lrepro.pipeline import job

log = job.start(snakemake, gpus=True, threads=True)
log.info("automatic parallelism with %d threads: %s", snakemake.threads, snakemake.params.autopar)
rows = autopar.measure(snakemake.params.autopar, snakemake.params.seed)
rows.append(results.metric("threads", torch.get_num_threads()))
metrics = results.write_metrics(rows, snakemake.output.metrics)
footer = provenance.footer(provenance.read(snakemake.output.machines), metrics, where="autopar")
autopar.draw_autopar(metrics, snakemake.output.figure, footer, snakemake.params.autopar)
