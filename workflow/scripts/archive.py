from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

import datetime as dt
import json
import platform
from pathlib import Path

from d2lrepro.core import environment
from d2lrepro.pipeline import archive, job

log = job.start(snakemake)
inputs = snakemake.input
tables = [inputs.claims, inputs.environment, *inputs.evidence, *inputs.machines, *inputs.curves]
manifest = archive.write(
    snakemake.output[0],
    {archive.LEDGER: inputs.ledger} | {path: path for path in tables},
    {
        "host": platform.node(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "preset": snakemake.params.preset,
        "requested": snakemake.params.requested,
        "deviations": [dict(zip(("key", "book", "value"), d)) for d in snakemake.params.deviations],
        "overridden": snakemake.params.overridden,
        "commit": environment.git_commit(Path(snakemake.scriptdir).parents[1]),
        "torch": json.loads(Path(inputs.environment).read_text())["torch_version"],
    },
)
log.info(
    "wrote %s: %d files, %d bytes before compression",
    snakemake.output[0],
    len(manifest["files"]),
    sum(f["bytes"] for f in manifest["files"].values()),
)
