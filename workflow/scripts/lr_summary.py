import json

import pandas as pd

from d2lrepro import environment, logs, results, scheduling

log = logs.setup(snakemake.log[0])
with open(snakemake.input.environment) as f:
    env = json.load(f)
history = pd.concat([pd.read_csv(path) for path in snakemake.input.runs], ignore_index=True)
footer = environment.summary(env, int(history["threads"].max()))
for (run, semantics), h in history.groupby(["run", "semantics"], sort=False):
    log.info("LeNet %s (%s): %.0f samples/s median over %d epochs on %s with %d threads",
             run, semantics, h["samples_per_s"].median(), len(h), h["device"].iloc[0], h["threads"].iloc[0])
rows = scheduling.training_metrics(history)
results.write_csv(history, snakemake.output.history)
results.write_metrics(rows, snakemake.output.metrics)
scheduling.draw_lrs(history, snakemake.output.lrs)
scheduling.draw_early(history, snakemake.output.early, footer)
book = history[history["semantics"] == "book"]
for run, h in book.groupby("run"):
    scheduling.draw_run(h, snakemake.output[run], footer)
