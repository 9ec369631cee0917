from d2lrepro.core import devices, logs
from d2lrepro.multidevice import launcher

log = logs.setup(snakemake.log[0])
# Before CUDA starts: this job's GPUs become its cuda:0, cuda:1, ...
devices.claim_gpus(snakemake.resources.gpu, log)
launcher.launch_training(
    snakemake.wildcards.run,
    snakemake.params.run,
    snakemake.params.seed,
    data=snakemake.input.data,
    history=snakemake.output.history,
    topk=snakemake.output.topk,
    topk_every=snakemake.params.topk_every,
    timeout=snakemake.params.timeout,
    log_path=snakemake.log[0],
)
