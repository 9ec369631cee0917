import subprocess

import pandas as pd

from d2lrepro import logs, multidevice, parallel, results

log = logs.setup(snakemake.log[0])
cost, model = snakemake.params.cost, snakemake.wildcards.model
reason = parallel.applicability(2)
if reason:
    log.info("cost model of %s: not applicable here: %s", model, reason)
    results.write_csv(pd.DataFrame({"note": [reason]}), snakemake.output[0])
else:
    argv = ["--cost-model", "--model", model, "--out", snakemake.output[0], "--seed", str(snakemake.params.seed),
            "--repeats", str(cost["repeats"]), "--timeout", str(snakemake.params.timeout),
            "--cost-batches", *map(str, cost["batches"])]
    command = multidevice.torchrun(2, argv)
    log.info("%s", " ".join(command))
    with open(snakemake.log[0], "a") as stream:
        subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, check=True)
