import torch

from d2lrepro.core import logs, results
from d2lrepro.multidevice import architectures

log = logs.setup(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
rows = architectures.ratio_metrics()
for row in rows:
    log.info("%s: %.4g %s", row["metric"], row["value"], row["unit"])
results.write_metrics(rows, snakemake.output[0])
