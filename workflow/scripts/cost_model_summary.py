from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import provenance
from d2lrepro.multidevice import cost_model
from d2lrepro.pipeline import job

job.start(snakemake)
cost_model.summarize(
    snakemake.input.costs,
    snakemake.input.examples,
    provenance.read(snakemake.input.machines),
    snakemake.output.metrics,
    snakemake.output.figure,
)
