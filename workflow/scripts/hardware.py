from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import provenance, results
from d2lrepro.performance import hardware
from d2lrepro.pipeline import job

job.start(snakemake, gpus=True, threads=True)
sweep, latency, rows, caches = hardware.measure(snakemake.params.hardware)
sweep = results.write_csv(sweep, snakemake.output.sweep)
results.write_csv(latency if latency is not None else [], snakemake.output.latency)
results.write_metrics(rows, snakemake.output.metrics)
# both sweeps use one core; the memory sweep's rows name its devices
records = provenance.read(snakemake.output.machines)
footer = provenance.footer(records, sweep, where="the memory sweep", threads=1)
hardware.draw_memory_sweep(sweep, latency, snakemake.output.figure, footer, caches)
