import pandas as pd
import torch

from d2lrepro.core import data, devices, logs, models, results
from d2lrepro.optimization import lr_schedules

log = logs.setup(snakemake.log[0])
# Before CUDA starts: a GPU shared with other jobs that only train becomes its cuda:0
devices.claim_shared_gpu(snakemake.resources, snakemake.config["jobs_per_gpu"], log)
torch.set_num_threads(snakemake.threads)
sweep, lr, variant = snakemake.params.sweep, snakemake.params.lr, snakemake.wildcards.warmup
device = devices.device_for(0, 1)
warmup_steps = sweep["warmup_steps"] if variant == "linear" else 0
fashion = data.load_data(snakemake.input.data, sweep["train_subset"], sweep["test_subset"], device)
runs = []
for seed in sweep["seeds"]:
    log.info("peak lr %g, warm-up over %d steps, seed %d, on %s", lr, warmup_steps, seed, device)
    history = lr_schedules.train(
        models.lenet(seed=seed),
        fashion,
        sweep["epochs"],
        [lr] * sweep["epochs"],
        batch_size=sweep["batch_size"],
        device=device,
        seed=seed,
        log=log,
        warmup_steps=warmup_steps,
    )
    runs.append(history.assign(peak_lr=lr, warmup=variant, warmup_steps=warmup_steps, seed=seed))
results.write_csv(pd.concat(runs, ignore_index=True), snakemake.output[0])
