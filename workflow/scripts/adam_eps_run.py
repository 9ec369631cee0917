from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

import time

import torch

from d2lrepro.core import results
from d2lrepro.optimization import adam_eps
from d2lrepro.pipeline import job

log = job.start(snakemake, threads=True)
p = snakemake.params
start = time.perf_counter()
runs = adam_eps.runs_at(
    p.eps, torch.load(snakemake.input.data), p.seeds, p.lrs, p.epochs, p.batch_size, p.eval_every
)
log.info("ε = %g: %d runs in %.1f s", p.eps, len(runs), time.perf_counter() - start)
results.write_csv(runs, snakemake.output.runs)
