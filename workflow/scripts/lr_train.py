import torch

from d2lrepro import logs, results, scheduling, training

log = logs.setup(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
p, w = snakemake.params, snakemake.wildcards
device = "cuda" if torch.cuda.is_available() else "cpu"
lrs = scheduling.lrs_per_epoch(w.run, p.epochs, w.semantics)
log.info("%s (%s semantics) on %s with %d threads; lr per epoch: %s", w.run, w.semantics, device,
         snakemake.threads, ", ".join(f"{lr:.4g}" for lr in lrs))
data = training.load_data(snakemake.input.data, p.train_subset, p.test_subset, device)
history = training.train(training.lenet(seed=p.seed), data, p.epochs, lrs, batch_size=p.batch_size,
                         device=device, seed=p.seed, log=log)
results.write_csv(history.assign(run=w.run, semantics=w.semantics, device=device,
                                 threads=snakemake.threads), snakemake.output[0])
