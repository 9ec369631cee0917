from d2lrepro import devices, logs, multigpu_launch

log = logs.setup(snakemake.log[0])
# Before CUDA starts: this job's GPUs become its cuda:0, cuda:1, ...
devices.claim_gpus(snakemake.resources.gpu, log)
multigpu_launch.launch_training(
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
