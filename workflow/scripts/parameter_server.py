from d2lrepro.multidevice import launcher
from d2lrepro.pipeline import job

job.start(snakemake, gpus=True, workers=True)
launcher.launch_param_server(
    snakemake.params.spec, snakemake.output[0], snakemake.params.timeout, snakemake.log[0]
)
