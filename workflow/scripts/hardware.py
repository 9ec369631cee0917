import torch

from d2lrepro import environment, hardware, logs, results

log = logs.setup(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
cfg = snakemake.params.hardware
caches = hardware.cache_sizes()
log.info("caches %s; sweep up to %d MiB", caches, cfg["sweep_max_mib"])
sweep = hardware.memory_sweep(cfg["sweep_max_mib"] * hardware.MIB)
for row in sweep.itertuples():
    log.info("%s %d bytes: %.2f GB/s", row.device, row.bytes, row.gbps)
rows = hardware.sweep_metrics(sweep, caches)
rows += hardware.bandwidth(cfg["bandwidth_mib"])
results.write_csv(sweep, snakemake.output.sweep)
results.write_metrics(rows, snakemake.output.metrics)
footer = environment.footer(snakemake.input.environment, threads=1)  # the sweep sums on one core
hardware.plot_memory_sweep(sweep, snakemake.output.figure, footer, caches)
