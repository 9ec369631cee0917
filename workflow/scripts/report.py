import json
from pathlib import Path

import pandas as pd

from d2lrepro.core import environment
from d2lrepro.pipeline import claims, job, report, settings

log = job.start(snakemake)
with open(snakemake.input.environment) as f:
    env = json.load(f)
run = settings.Settings(
    requested=snakemake.params.requested,
    preset=snakemake.params.preset,
    values={},
    deviations=[settings.Deviation(*d) for d in snakemake.params.deviations],
)
html = report.render(
    claims.load(snakemake.input.ledger),
    pd.read_csv(snakemake.input.claims, keep_default_na=False),
    env,
    run,
    commit=environment.git_commit(Path(snakemake.scriptdir).parents[1]),
    template=snakemake.input.template,
)
Path(snakemake.output[0]).write_text(html)
log.info("wrote %s (%d bytes)", snakemake.output[0], len(html))
