from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.multidevice import cost_model
from d2lrepro.pipeline import job

job.start(snakemake, gpus=True, workers=True, when_short=job.WhenShort.ONE_DEVICE)
cost_model.launch(
    snakemake.params.costs,
    {model: snakemake.output[model] for model in snakemake.params.costs},
    snakemake.output.examples,
    snakemake.params.seed,
    snakemake.params.timeout,
    snakemake.log[0],
    shortfall=job.shortfall(snakemake).get("reason", ""),
)
