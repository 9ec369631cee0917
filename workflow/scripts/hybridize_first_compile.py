from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

import json

from d2lrepro.performance import hybridize_first_compile
from d2lrepro.pipeline import job

log = job.start(snakemake, threads=True)
record = hybridize_first_compile.prepare(snakemake.params.modes)
log.info("the first torch.compile of this machine: %s", record)
with open(snakemake.output[0], "w") as f:
    json.dump(record, f, indent=2)
