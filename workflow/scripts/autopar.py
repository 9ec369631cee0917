import torch

from d2lrepro import autopar, environment, logs, results

log = logs.setup(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
cfg, seed = snakemake.params.autopar, snakemake.params.seed
log.info("automatic parallelism with %d threads: %s", torch.get_num_threads(), cfg)
size, n, limit = cfg["size"], cfg["matmuls"], cfg["max_run_time"]
rows = autopar.autopar_cpu(size, n, seed, max_run_time=limit)
rows += autopar.autopar_streams(size, n, seed, max_run_time=limit)
rows += autopar.autopar_gpus(size, n, seed, max_run_time=limit)
rows += autopar.copy_overlap(size, n, seed, max_run_time=limit)
rows.append(results.metric("threads", torch.get_num_threads()))
metrics = results.write_metrics(rows, snakemake.output.metrics)
footer = environment.footer(snakemake.input.environment, snakemake.threads)
autopar.plot_autopar(metrics, snakemake.output.figure, footer)
