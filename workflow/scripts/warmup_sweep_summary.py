from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

import pandas as pd

from d2lrepro.core import provenance, results
from d2lrepro.optimization import warmup_sweep
from d2lrepro.pipeline import job

log = job.start(snakemake)
sweep = pd.concat([pd.read_csv(path) for path in snakemake.input.runs], ignore_index=True)
log.info("%d warm-up runs", len(sweep))
results.write_metrics(warmup_sweep.sweep_metrics(sweep), snakemake.output.metrics)
footer = provenance.footer(
    provenance.read(snakemake.input.machines), sweep, where="the warm-up runs"
)
warmup_sweep.draw_sweep(sweep, snakemake.output.figure, footer, snakemake.params.scaled)
