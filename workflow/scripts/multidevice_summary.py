import json
from pathlib import Path

import pandas as pd

from d2lrepro import dataparallel, environment, logs, results

logs.setup(snakemake.log[0])
with open(snakemake.input.environment) as f:
    env = json.load(f)
histories = {Path(p).name.removesuffix(".csv"): pd.read_csv(p)
             for p in [*snakemake.input.runs, *snakemake.input.book]}
costs = {Path(p).stem.removeprefix("cost_"): pd.read_csv(p) for p in snakemake.input.costs}
footer = environment.summary(env, threads=1)  # one per device process

rows = dataparallel.demonstrations()
for name, history in histories.items():
    rows += dataparallel.run_metrics(name, history)
values = {r["metric"]: r["value"] for r in rows}
for model in ("lenet", "resnet18"):
    rows += dataparallel.comparison_metrics(values, model)
for model, cost in costs.items():
    rows += dataparallel.cost_metrics(cost, model)
results.write_metrics(rows, snakemake.output.metrics)

for model, path in (("lenet", snakemake.output.lenet), ("resnet18", snakemake.output.resnet)):
    runs = {k: v for k, v in histories.items() if k.startswith((f"{model}.", f"book_{model}."))}
    dataparallel.draw_test_acc(runs, path, footer)
dataparallel.draw_throughput(values, list(histories), snakemake.output.throughput, footer)
dataparallel.draw_topk(pd.read_csv(snakemake.input.topk), snakemake.output.topk, footer)
dataparallel.draw_cost(costs, snakemake.output.cost, footer)
