import pandas as pd

from d2lrepro.core import machines
from d2lrepro.pipeline import claims, job, scaling

log = job.start(snakemake)
table = claims.evaluate(
    claims.load(snakemake.input.ledger),
    pd.read_csv,
    lambda evidence: machines.read(machines.sidecar(evidence)),
    [tuple(d) for d in snakemake.params.deviations],
    snakemake.params.preset,
    scaling.job_seconds(snakemake.params.timed),
)
for row in table.itertuples():
    log.info("%s: %s %s", row.id, row.verdict, row.reason if isinstance(row.reason, str) else "")
table.to_csv(snakemake.output[0], index=False)
