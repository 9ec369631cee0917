from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.multidevice import data_parallel
from d2lrepro.pipeline import job

job.start(snakemake, gpus=True, workers=True)
data_parallel.train(
    snakemake.wildcards.run,
    snakemake.params.run,
    snakemake.params.seed,
    data=snakemake.input.data,
    history=snakemake.output.history,
    topk=snakemake.output.topk,
    topk_every=snakemake.params.topk_every,
    timeout=snakemake.params.timeout,
    log_path=snakemake.log[0],
    shortfall=job.shortfall(snakemake).get("reason", ""),
)
