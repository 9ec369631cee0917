from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import results
from d2lrepro.optimization import lr_schedules
from d2lrepro.pipeline import job

log = job.start(snakemake, threads=True)
values = lr_schedules.schedule_values()
for name, series in values.items():
    log.info("%s: %s", name, ", ".join(f"{v:.4g}" for v in series))
results.write_metrics(lr_schedules.schedule_metrics(values), snakemake.output.metrics)
lr_schedules.draw_schedules(values, snakemake.output)
