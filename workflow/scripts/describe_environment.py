import json

from d2lrepro.core import environment, logs

log = logs.setup(snakemake.log[0])
env = environment.describe()
log.info("%s", environment.summary(env))
with open(snakemake.output[0], "w") as f:
    json.dump(env, f, indent=2)
