from d2lrepro import intro, logs, results

log = logs.setup(snakemake.log[0])
rows = intro.measure(snakemake.params.step)
for row in rows:
    log.info("%s = %.6g", row["metric"], row["value"])
results.write_metrics(rows, snakemake.output.metrics)
intro.draw({k: v for k, v in snakemake.output.items() if k != "metrics"}, snakemake.params.step)
