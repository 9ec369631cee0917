from d2lrepro import logs, results, traces

log = logs.setup(snakemake.log[0])
rows = traces.weight_metrics(snakemake.params.weights)
for row in rows:
    log.info("%s = %.6g", row["metric"], row["value"])
results.write_metrics(rows, snakemake.output.metrics)
traces.draw_weights(snakemake.params.weights, snakemake.output)
