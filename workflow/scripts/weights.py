from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import results
from d2lrepro.optimization import weights
from d2lrepro.pipeline import job

job.start(snakemake, threads=True)
rows = weights.weight_metrics(snakemake.params.weights)
results.write_metrics(rows, snakemake.output.metrics)
weights.draw_weights(snakemake.params.weights, snakemake.output)
