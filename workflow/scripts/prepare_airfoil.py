from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import data
from d2lrepro.pipeline import job

log = job.start(snakemake)
tensors = data.prepare_airfoil(snakemake.input.table, n=snakemake.params.examples)
log.info("features %s, labels %s", tuple(tensors["features"].shape), tuple(tensors["labels"].shape))
data.save(tensors, snakemake.output.tensors)
