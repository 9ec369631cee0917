from d2lrepro.multidevice import launcher
from d2lrepro.pipeline import job

job.start(snakemake, gpus=True, workers=True)
launcher.launch_probes(
    snakemake.params.costs,
    {model: snakemake.output[model] for model in snakemake.params.costs},
    snakemake.output.examples,
    snakemake.params.seed,
    snakemake.params.timeout,
    snakemake.log[0],
)
