import pandas as pd

from d2lrepro.core import machines, plotting, reference, results
from d2lrepro.optimization import lr_schedules
from d2lrepro.pipeline import job

log = job.start(snakemake)
history = pd.concat([pd.read_csv(path) for path in snakemake.input.runs], ignore_index=True)
records = machines.read(snakemake.input.machines)
for (run, semantics, seed), h in history.groupby(["run", "semantics", "seed"], sort=False):
    log.info(
        "LeNet %s (%s, seed %d): %.0f samples/s median over %d epochs on %s with %d threads",
        run,
        semantics,
        seed,
        h["samples_per_s"].median(),
        len(h),
        h["device"].iloc[0],
        h["threads"].iloc[0],
    )
results.write_csv(history, snakemake.output.history)
book = reference.load(snakemake.input.book_curves)
results.write_metrics(lr_schedules.training_metrics(history, book), snakemake.output.metrics)
footer = machines.footer(records, history, where="the lr-schedule runs")
scale = plotting.scale_note(snakemake.params.scaled)
lr_schedules.draw_lrs(history, snakemake.output.lrs, footer, scale)
lr_schedules.draw_early(history, snakemake.output.early, footer, scale)
for run, h in history[history["semantics"] == "as_written"].groupby("run"):
    footer = machines.footer(records, h, where="the lr-schedule runs")
    lr_schedules.draw_run(h, snakemake.output[run], footer, book, scale)
