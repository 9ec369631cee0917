from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.multidevice import parameter_server
from d2lrepro.pipeline import job

job.start(snakemake, gpus=True, workers=True)
parameter_server.launch(
    snakemake.params.spec,
    snakemake.output[0],
    snakemake.params.timeout,
    snakemake.log[0],
    shortfall=job.shortfall(snakemake),
)
