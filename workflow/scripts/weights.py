from d2lrepro import logs, results, traces

logs.setup(snakemake.log[0])
rows = traces.weight_metrics(snakemake.params.weights)
results.write_metrics(rows, snakemake.output.metrics)
traces.draw_weights(snakemake.params.weights, snakemake.output)
