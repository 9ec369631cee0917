from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import reference
from d2lrepro.multidevice import single_process
from d2lrepro.pipeline import job

job.start(snakemake)
single_process.summarize(
    snakemake.input.runs, snakemake.output.metrics, reference.load(snakemake.input.book_curves)
)
