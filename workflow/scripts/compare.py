from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from pathlib import Path

from d2lrepro.core import environment, reference
from d2lrepro.pipeline import archive, claims, compare, job

log = job.start(snakemake)
runs = [archive.read(path) for path in snakemake.input.runs]
html, table = compare.render(
    runs,
    reference.load(snakemake.input.book_curves),
    commit=environment.git_commit(Path(snakemake.scriptdir).parents[1]),
    template=snakemake.input.template,
    ledger=claims.load(snakemake.input.ledger),
)
Path(snakemake.output.html).write_text(html)
table.to_csv(snakemake.output.table, index=False)
log.info("%d runs, %d claims: %s", len(runs), len(table), table["group"].value_counts().to_dict())
