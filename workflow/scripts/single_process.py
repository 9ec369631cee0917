from d2lrepro.core import devices, logs
from d2lrepro.multidevice import single_process

log = logs.setup(snakemake.log[0])
# Before CUDA starts: this job's GPUs become its cuda:0, cuda:1, ...
devices.claim_gpus(snakemake.resources.gpu, log)
single_process.run_book(
    snakemake.params.runs,
    snakemake.params.seed,
    snakemake.input.data,
    {name: snakemake.output[name] for name in snakemake.params.runs},
)
