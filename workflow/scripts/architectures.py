from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import results
from d2lrepro.multidevice import architectures
from d2lrepro.pipeline import job

log = job.start(snakemake, threads=True)
rows = architectures.ratio_metrics()
for row in rows:
    log.info("%s: %.4g %s", row["metric"], row["value"], row["unit"])
results.write_metrics(rows, snakemake.output[0])
