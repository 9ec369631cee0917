from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import provenance, reference
from d2lrepro.multidevice import data_parallel
from d2lrepro.pipeline import job

job.start(snakemake)
data_parallel.summarize(
    run_files=dict(zip(map(tuple, snakemake.params.runs), snakemake.input.runs)),
    single_process_files=snakemake.input.single_process,
    topk_files=dict(zip(snakemake.params.topk_runs, snakemake.input.topk)),
    records=provenance.read(snakemake.input.machines),
    metrics_out=snakemake.output.metrics,
    figure_paths=snakemake.output,
    book=reference.load(snakemake.input.book_curves),
    scaled=snakemake.params.scaled,
)
