from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

import pandas as pd

from d2lrepro.core import provenance, results
from d2lrepro.optimization import adam_eps
from d2lrepro.pipeline import job

job.start(snakemake)
runs = pd.concat([pd.read_csv(path) for path in snakemake.input.runs], ignore_index=True)
records = provenance.read(snakemake.input.machines)
runs = results.write_csv(runs, snakemake.output.runs)
rows = [r | {"machine": provenance.of_frame(runs)} for r in adam_eps.eps_metrics(runs)]
results.write_metrics(rows, snakemake.output.metrics)
footer = provenance.footer(records, runs, where=snakemake.output.runs)
adam_eps.draw_eps(runs, snakemake.output.figure, footer)
