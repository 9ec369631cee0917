from d2lrepro.core import logs, results
from d2lrepro.optimization import traces

logs.setup(snakemake.log[0])
rows = traces.weight_metrics(snakemake.params.weights)
results.write_metrics(rows, snakemake.output.metrics)
traces.draw_weights(snakemake.params.weights, snakemake.output)
