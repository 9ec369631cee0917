from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import provenance, reference
from d2lrepro.optimization import airfoil_summary
from d2lrepro.pipeline import job

job.start(snakemake)
airfoil_summary.summarize(
    run_files=snakemake.input.runs,
    metric_files=snakemake.input.metric_files,
    records=provenance.read(snakemake.input.machines),
    book=reference.load(snakemake.input.book_curves),
    runs_out=snakemake.output.runs,
    metrics_out=snakemake.output.metrics,
    figure_paths=snakemake.output,
)
