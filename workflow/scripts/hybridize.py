from pathlib import Path

import torch

from d2lrepro import compilers, devices, environment, logs, results

log = logs.setup(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
cfg, seed = snakemake.params.hybridize, snakemake.params.seed
device = devices.device_for(0, 1)
log.info("hybridization on %s with %d threads: %s", device, torch.get_num_threads(), cfg)

rows, program = compilers.imperative_vs_symbolic()
log.info("symbolic program:\n%s", program)
rows += compilers.hybridize(
    cfg["batch_sizes"], cfg["modes"], cfg["n_calls"], device, seed, max_run_time=cfg["max_run_time"]
)
model = Path(snakemake.output.model)
rows += compilers.serialize(model.parent, seed)
assert model.exists(), f"{model} was not written"
rows.append(results.metric("threads", torch.get_num_threads()))
metrics = results.write_metrics(rows, snakemake.output.metrics)
footer = environment.footer(snakemake.input.environment, snakemake.threads)
compilers.plot_hybridization(metrics, snakemake.output.figure, footer)
