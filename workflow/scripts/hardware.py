import torch

from d2lrepro.core import devices, environment, logs, results
from d2lrepro.performance import hardware

log = logs.setup(snakemake.log[0])
# Before CUDA starts: this job's GPUs become its cuda:0, cuda:1, ...
devices.claim_gpus(snakemake.resources.gpu, log)
torch.set_num_threads(snakemake.threads)
sweep, latency, rows, caches = hardware.measure(snakemake.params.hardware)
results.write_csv(sweep, snakemake.output.sweep)
results.write_csv(latency if latency is not None else [], snakemake.output.latency)
results.write_metrics(rows, snakemake.output.metrics)
footer = environment.footer(snakemake.input.environment, threads=1)  # both sweeps use one core
hardware.plot_memory_sweep(sweep, latency, snakemake.output.figure, footer, caches)
