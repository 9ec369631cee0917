import json

import torch

from d2lrepro import bench, environment, logs, results

log = logs.setup(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
cfg = snakemake.params.hardware
with open(snakemake.input.environment) as f:
    footer = environment.summary(json.load(f), threads=1)  # the sweep sums on one core
cuda_devices = environment.cuda_devices()
caches = bench.cache_sizes()
log.info("caches %s; sweep up to %d MiB; %d CUDA devices", caches, cfg["sweep_max_mib"], cuda_devices)
sweep = bench.memory_sweep(cfg["sweep_max_mib"] * bench.MIB)
for row in sweep.itertuples():
    log.info("%s %d bytes: %.2f GB/s", row.device, row.bytes, row.gbps)
rows = bench.sweep_metrics(sweep, caches)
rows += bench.bandwidth(cfg["bandwidth_mib"], cuda_devices)
results.write_csv(sweep, snakemake.output.sweep)
results.write_metrics(rows, snakemake.output.metrics)
bench.plot_memory_sweep(sweep, snakemake.output.figure, footer, caches)
