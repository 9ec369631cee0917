import json

import torch

from d2lrepro import bench, environment, logs, results

log = logs.setup(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
cfg, seed = snakemake.params.autopar, snakemake.params.seed
with open(snakemake.input.environment) as f:
    footer = environment.summary(json.load(f), snakemake.threads)
cuda_devices = environment.cuda_devices()
log.info("automatic parallelism with %d threads, %d CUDA devices: %s", torch.get_num_threads(), cuda_devices, cfg)
size, n, limit = cfg["size"], cfg["matmuls"], cfg["max_run_time"]
rows = bench.autopar_cpu(size, n, seed, max_run_time=limit)
rows += bench.autopar_streams(size, n, seed, cuda_devices, max_run_time=limit)
rows += bench.autopar_gpus(size, n, seed, cuda_devices, max_run_time=limit)
rows += bench.copy_overlap(size, n, seed, cuda_devices, max_run_time=limit)
rows.append(results.metric("threads", torch.get_num_threads()))
metrics = results.write_metrics(rows, snakemake.output.metrics)
bench.plot_autopar(metrics, snakemake.output.figure, footer)
