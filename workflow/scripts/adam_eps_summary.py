import pandas as pd

from d2lrepro.core import machines, results
from d2lrepro.optimization import eps_sweep
from d2lrepro.pipeline import job

job.start(snakemake)
runs = pd.concat([pd.read_csv(path) for path in snakemake.input.runs], ignore_index=True)
records = machines.read(snakemake.input.machines)
runs = results.write_csv(runs, snakemake.output.runs)
rows = [r | {"machine": machines.of_frame(runs)} for r in eps_sweep.eps_metrics(runs)]
results.write_metrics(rows, snakemake.output.metrics)
footer = machines.footer(records, runs, where=snakemake.output.runs)
eps_sweep.draw_eps(runs, snakemake.output.figure, footer)
