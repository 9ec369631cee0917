from d2lrepro.core import logs, results
from d2lrepro.optimization import lr_schedules

log = logs.setup(snakemake.log[0])
values = lr_schedules.plot_values()
for name, series in values.items():
    log.info("%s: %s", name, ", ".join(f"{v:.4g}" for v in series))
results.write_metrics(lr_schedules.plot_metrics(values), snakemake.output.metrics)
lr_schedules.draw_plots(values, snakemake.output)
