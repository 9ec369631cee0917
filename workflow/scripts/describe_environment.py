from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

import json

from d2lrepro.core import environment
from d2lrepro.pipeline import job

log = job.start(snakemake)
env = environment.describe()
log.info("%s", environment.summary(env))
with open(snakemake.output[0], "w") as f:
    json.dump(env, f, indent=2)
