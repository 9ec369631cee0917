import torch

from d2lrepro.core import devices, logs, results
from d2lrepro.performance import asynchrony

log = logs.setup(snakemake.log[0])
# Before CUDA starts: this job's GPUs become its cuda:0, cuda:1, ...
devices.claim_gpus(snakemake.resources.gpu, log)
torch.set_num_threads(snakemake.threads)
log.info("asynchrony with %d threads: %s", snakemake.threads, snakemake.params.asynchrony)
rows = asynchrony.measure(snakemake.params.asynchrony, snakemake.params.seed)
rows.append(results.metric("threads", torch.get_num_threads()))
results.write_metrics(rows, snakemake.output.metrics)
