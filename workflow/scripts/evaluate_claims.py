import json

import pandas as pd

from d2lrepro.pipeline import claims, job, scaling

log = job.start(snakemake)
with open(snakemake.input.environment) as f:
    env = json.load(f)
table = claims.evaluate(
    claims.load(snakemake.input.ledger),
    pd.read_csv,
    env,
    [tuple(d) for d in snakemake.params.deviations],
    snakemake.params.preset,
    scaling.job_seconds(snakemake.params.timed),
)
for row in table.itertuples():
    log.info("%s: %s %s", row.id, row.verdict, row.reason if isinstance(row.reason, str) else "")
table.to_csv(snakemake.output[0], index=False)
