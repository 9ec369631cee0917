from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import provenance, reference
from d2lrepro.optimization import lr_schedules
from d2lrepro.pipeline import job

job.start(snakemake)
lr_schedules.summarize(
    run_files=snakemake.input.runs,
    schedule_plots_file=snakemake.input.plots,
    records=provenance.read(snakemake.input.machines),
    book=reference.load(snakemake.input.book_curves),
    history_out=snakemake.output.history,
    metrics_out=snakemake.output.metrics,
    figure_paths=snakemake.output,
    scaled=snakemake.params.scaled,
)
