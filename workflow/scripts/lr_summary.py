import json

import pandas as pd

from d2lrepro import environment, logs, results, scheduling

log = logs.setup(snakemake.log[0])
with open(snakemake.input.environment) as f:
    footer = environment.summary(json.load(f))
history = pd.concat([pd.read_csv(path) for path in snakemake.input.runs], ignore_index=True)
rows = scheduling.training_metrics(history)
for row in rows:
    log.info("%s = %.6g", row["metric"], row["value"])
results.write_csv(history, snakemake.output.history)
results.write_metrics(rows, snakemake.output.metrics)
scheduling.draw_lrs(history, snakemake.output.lrs)
scheduling.draw_early(history, snakemake.output.early, footer)
book = history[history["semantics"] == "book"]
for run, h in book.groupby("run"):
    scheduling.draw_run(h, snakemake.output[run], footer)
