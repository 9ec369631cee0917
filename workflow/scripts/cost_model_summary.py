from d2lrepro.core import machines
from d2lrepro.multidevice import cost_model
from d2lrepro.pipeline import job

job.start(snakemake)
cost_model.summarize(
    snakemake.input.costs,
    snakemake.input.examples,
    machines.read(snakemake.input.machines),
    snakemake.output.metrics,
    snakemake.output.figure,
)
