from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

import pandas as pd

from d2lrepro.core import provenance
from d2lrepro.pipeline import claims, explain, job, scaling

log = job.start(snakemake)
ledger = claims.load(snakemake.input.ledger)
deviations = [tuple(d) for d in snakemake.params.deviations]
table = claims.evaluate(
    ledger,
    pd.read_csv,
    lambda evidence: provenance.read(provenance.sidecar(evidence)),
    deviations,
    snakemake.params.preset,
    scaling.rates(snakemake.params.timed),
    set(snakemake.params.overridden),
)
table = explain.explain(ledger, table, pd.read_csv, deviations)
table = explain.in_plain_words(ledger, table, pd.read_csv)
for row in table.itertuples():
    log.info("%s: %s %s", row.id, row.verdict, row.reason if isinstance(row.reason, str) else "")
table.to_csv(snakemake.output[0], index=False)
