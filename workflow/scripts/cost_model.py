from d2lrepro.core import devices, logs
from d2lrepro.multidevice import launcher

log = logs.setup(snakemake.log[0])
# Before CUDA starts: this job's GPUs become its cuda:0, cuda:1, ...
devices.claim_gpus(snakemake.resources.gpu, log)
launcher.launch_probes(
    snakemake.params.costs,
    {model: snakemake.output[model] for model in snakemake.params.costs},
    snakemake.output.examples,
    snakemake.params.seed,
    snakemake.params.timeout,
    snakemake.log[0],
)
