from d2lrepro import devices, logs, multigpu_launch

log = logs.setup(snakemake.log[0])
# Before CUDA starts: this job's GPUs become its cuda:0, cuda:1, ...
devices.claim_gpus(snakemake.resources.gpu, log)
multigpu_launch.launch_probes(
    snakemake.params.costs,
    {model: snakemake.output[model] for model in snakemake.params.costs},
    snakemake.output.examples,
    snakemake.params.seed,
    snakemake.params.timeout,
    snakemake.log[0],
)
