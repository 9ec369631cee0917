from d2lrepro import logs, results, scheduling

log = logs.setup(snakemake.log[0])
values = scheduling.plot_values()
for name, series in values.items():
    log.info("%s: %s", name, ", ".join(f"{v:.4g}" for v in series))
results.write_metrics(scheduling.plot_metrics(values), snakemake.output.metrics)
scheduling.draw_plots(values, snakemake.output)
