import torch

from d2lrepro import bench, environment, logs, results

log = logs.setup(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
cfg = snakemake.params.asynchrony
cuda_devices = environment.cuda_devices()
log.info("asynchrony with %d threads, %d CUDA devices: %s", torch.get_num_threads(), cuda_devices, cfg)
rows = bench.asynchrony(cfg["size"], cfg["steps"], cfg["repeats"], cuda_devices, snakemake.params.seed)
rows += bench.queue_memory(cfg["memory_size"], cfg["memory_steps"], cuda_devices)
rows.append(results.metric("threads", torch.get_num_threads()))
results.write_metrics(rows, snakemake.output.metrics)
