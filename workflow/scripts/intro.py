from d2lrepro.core import logs, results
from d2lrepro.optimization import intro

logs.setup(snakemake.log[0])
rows = intro.measure(snakemake.params.step)
results.write_metrics(rows, snakemake.output.metrics)
intro.draw({k: v for k, v in snakemake.output.items() if k != "metrics"}, snakemake.params.step)
