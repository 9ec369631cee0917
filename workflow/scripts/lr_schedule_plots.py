from d2lrepro import logs, lr_training, results

log = logs.setup(snakemake.log[0])
values = lr_training.plot_values()
for name, series in values.items():
    log.info("%s: %s", name, ", ".join(f"{v:.4g}" for v in series))
results.write_metrics(lr_training.plot_metrics(values), snakemake.output.metrics)
lr_training.draw_plots(values, snakemake.output)
