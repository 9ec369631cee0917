import pandas as pd

from d2lrepro.core import machines, reference, results
from d2lrepro.optimization import airfoil
from d2lrepro.pipeline import job

log = job.start(snakemake)
runs = pd.concat([pd.read_csv(path) for path in snakemake.input.runs], ignore_index=True)
records = machines.read(snakemake.input.machines)
finals = runs.groupby(["setting", "seed"])["elapsed"].max()
log.info(
    "sweep: %d settings x %d seeds, %.2f s of training in all (evaluation excluded)",
    runs["setting"].nunique(),
    runs["seed"].nunique(),
    finals.sum(),
)
book = reference.load(snakemake.input.book_curves)
rows = [r | {"machine": machines.of_frame(runs)} for r in airfoil.summarize(runs, book)]
# The scratch-against-torch comparisons, each from its own job, its rows naming its machine.
blank = {"unit": "", "note": "", "status": ""}
compared = [pd.read_csv(path).fillna(blank) for path in snakemake.input.compared]
rows += [row for frame in compared for row in frame.to_dict("records")]
results.write_csv(runs, snakemake.output.runs)
results.write_metrics(rows, snakemake.output.metrics)
for name, group in runs.groupby("setting"):
    footer = machines.footer(records, group, where="the airfoil runs")
    airfoil.draw_setting(group, snakemake.output[name], footer, book)
