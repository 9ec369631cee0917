from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import results
from d2lrepro.optimization import lr_schedules
from d2lrepro.pipeline import job

log = job.start(snakemake, gpus="shared", threads=True)
p, w = snakemake.params, snakemake.wildcards
history = lr_schedules.train_run(
    w.run,
    w.semantics,
    p.seed,
    snakemake.input.data,
    p.epochs,
    p.batch_size,
    p.train_subset,
    p.test_subset,
    log,
)
results.write_csv(history, snakemake.output[0])
