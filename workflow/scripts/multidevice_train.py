import hashlib
import json
import subprocess
from pathlib import Path

import pandas as pd

from d2lrepro import logs, multidevice, parallel, results

log = logs.setup(snakemake.log[0])
run, out = snakemake.params.run, snakemake.output
reason = parallel.applicability(run["devices"])
if reason:
    log.info("%s: not applicable here: %s", snakemake.wildcards.run, reason)
    results.write_csv(pd.DataFrame({"note": [reason]}), out.history)
    results.write_csv(pd.DataFrame(columns=multidevice.TOPK_COLUMNS), out.topk)
else:
    # The checkpoint lives outside the outputs, so an interrupted job resumes from it; its name
    # carries the run's settings, so a changed setting never resumes from a stale one.
    key = hashlib.sha256(json.dumps([run, snakemake.params.seed], sort_keys=True).encode()).hexdigest()[:12]
    checkpoint = Path("results/multidevice/checkpoints") / f"{snakemake.wildcards.run}-{key}.pt"
    argv = multidevice.run_argv(run) + [
        "--data", snakemake.input.data, "--out", out.history,
        "--topk-out", out.topk, "--topk-every", str(snakemake.params.topk_every),
        "--checkpoint", str(checkpoint), "--seed", str(snakemake.params.seed),
        "--timeout", str(snakemake.params.timeout)]
    command = multidevice.torchrun(run["devices"], argv)
    log.info("%s", " ".join(command))
    with open(snakemake.log[0], "a") as stream:
        subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, check=True)
    checkpoint.unlink()
