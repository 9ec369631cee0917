from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

import json
from pathlib import Path

import pandas as pd

from d2lrepro.core import environment, paths, provenance
from d2lrepro.pipeline import claims, job, judging, markdown, report, settings

log = job.start(snakemake)
with open(snakemake.input.environment) as f:
    env = json.load(f)
run = settings.Settings(
    requested=snakemake.params.requested,
    preset=snakemake.params.preset,
    values={},
    deviations=[settings.Deviation(*d) for d in snakemake.params.deviations],
    overridden=frozenset(snakemake.params.overridden),
)
ledger = claims.load(snakemake.input.ledger)
table = pd.read_csv(snakemake.input.claims, keep_default_na=False)
html = report.render(
    ledger,
    table,
    env,
    run,
    commit=environment.git_commit(Path(snakemake.scriptdir).parents[1]),
    template=snakemake.input.template,
    measured_on=provenance.read(snakemake.input.machines).values(),
    timings=judging.timing_rows(Path(snakemake.input.timings).read_text()),
)
Path(snakemake.output.html).write_text(html)
log.info("wrote %s (%d bytes)", snakemake.output.html, len(html))
Path(snakemake.output.markdown).write_text(markdown.table(ledger, table))
pages = report.section_pages(ledger, table, template=snakemake.input.section_template)
for section, page in pages.items():
    paths.claims_table(section).write_text(page)
log.info("wrote the claims pages of %d sections", len(pages))
