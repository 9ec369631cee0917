from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.multidevice import single_process
from d2lrepro.pipeline import job

job.start(snakemake, gpus=True, when_short=job.WhenShort.ONE_GPU)
single_process.run_book(
    snakemake.params.runs,
    snakemake.params.seed,
    snakemake.input.data,
    {name: snakemake.output[name] for name in snakemake.params.runs},
    planned_gpus=job.shortfall(snakemake).get("gpus"),
)
