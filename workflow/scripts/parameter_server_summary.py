from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import provenance
from d2lrepro.multidevice import parameter_server
from d2lrepro.pipeline import job

job.start(snakemake)
parameter_server.summarize(
    snakemake.input.metrics, provenance.read(snakemake.input.machines), snakemake.output.figure
)
