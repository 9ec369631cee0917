import torch

from d2lrepro.core import data, devices, logs, models, results
from d2lrepro.optimization import lr_schedules, schedulers

log = logs.setup(snakemake.log[0])
# Before CUDA starts: a GPU shared with other jobs that only train becomes its cuda:0
devices.claim_shared_gpu(snakemake.resources, snakemake.config["jobs_per_gpu"], log)
torch.set_num_threads(snakemake.threads)
p, w = snakemake.params, snakemake.wildcards
device = devices.device_for(0, 1)
log.info(
    "%s (%s semantics, seed %d) on %s with %d threads",
    w.run,
    w.semantics,
    p.seed,
    device,
    snakemake.threads,
)
fashion = data.load_data(snakemake.input.data, p.train_subset, p.test_subset, device)
history = lr_schedules.train(
    models.lenet(seed=p.seed),
    fashion,
    p.epochs,
    schedulers.schedule(w.run, w.semantics),
    batch_size=p.batch_size,
    device=device,
    seed=p.seed,
    log=log,
)
results.write_csv(
    history.assign(
        run=w.run,
        semantics=w.semantics,
        seed=p.seed,
        device=str(device),
        threads=snakemake.threads,
    ),
    snakemake.output[0],
)
