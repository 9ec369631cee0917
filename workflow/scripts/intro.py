from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import results
from d2lrepro.optimization import intro
from d2lrepro.pipeline import job

job.start(snakemake, threads=True)
rows = intro.measure(snakemake.params.step)
results.write_metrics(rows, snakemake.output.metrics)
intro.draw({k: v for k, v in snakemake.output.items() if k != "metrics"}, snakemake.params.step)
