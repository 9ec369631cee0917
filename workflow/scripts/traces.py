from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import results
from d2lrepro.optimization import traces
from d2lrepro.pipeline import job

job.start(snakemake, threads=True)
steps = traces.run_traces(snakemake.params.runs, snakemake.params.steps, snakemake.params.start)
rows = traces.trace_metrics(steps) + traces.adagrad_metrics(
    snakemake.params.runs, snakemake.params.steps, snakemake.params.start
)
results.write_csv(steps, snakemake.output.steps)
results.write_metrics(rows, snakemake.output.metrics)
for run, points in steps.groupby("run"):
    traces.draw_trace(points, snakemake.output[run])
