from d2lrepro.core import environment, results
from d2lrepro.performance import hardware
from d2lrepro.pipeline import job

job.start(snakemake, gpus=True, threads=True)
sweep, latency, rows, caches = hardware.measure(snakemake.params.hardware)
results.write_csv(sweep, snakemake.output.sweep)
results.write_csv(latency if latency is not None else [], snakemake.output.latency)
results.write_metrics(rows, snakemake.output.metrics)
footer = environment.footer(snakemake.input.environment, threads=1)  # both sweeps use one core
hardware.draw_memory_sweep(sweep, latency, snakemake.output.figure, footer, caches)
