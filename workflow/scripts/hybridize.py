from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from pathlib import Path

import torch

from d2lrepro.core import provenance, results
from d2lrepro.performance import hybridize
from d2lrepro.pipeline import job

log = job.start(snakemake, gpus=True, threads=True)
log.info("hybridize with %d threads: %s", snakemake.threads, snakemake.params.hybridize)
rows = hybridize.measure(
    snakemake.params.hybridize, snakemake.params.seed, Path(snakemake.output.model).parent
)
rows.append(results.metric("threads", torch.get_num_threads()))
metrics = results.write_metrics(rows, snakemake.output.metrics)
footer = provenance.footer(provenance.read(snakemake.output.machines), metrics, where="hybridize")
hybridize.draw_hybridization(metrics, snakemake.output.figure, footer)
