import torch

from d2lrepro import asynchrony, logs, results

log = logs.setup(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
cfg = snakemake.params.asynchrony
log.info("asynchrony with %d threads: %s", torch.get_num_threads(), cfg)
rows = asynchrony.asynchrony(cfg["size"], cfg["steps"], cfg["repeats"], snakemake.params.seed)
rows += asynchrony.queue_memory(cfg["memory_size"], cfg["memory_steps"])
rows.append(results.metric("threads", torch.get_num_threads()))
results.write_metrics(rows, snakemake.output.metrics)
