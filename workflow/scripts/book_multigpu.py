import pandas as pd
import torch

from d2lrepro import environment, logs, results, singleprocess, training

log = logs.setup(snakemake.log[0])
run, model = snakemake.params.run, snakemake.wildcards.model
gpus = environment.cuda_devices()
if gpus < 2:
    reason = f"the book's one-process path needs 2 CUDA devices, this machine has {gpus}"
    log.info("%s: not applicable here: %s", model, reason)
    results.write_csv(pd.DataFrame({"note": [reason]}), snakemake.output[0])
else:
    devices = [torch.device("cuda", i) for i in range(2)]
    data = training.load_data(snakemake.input.data, run.get("train_subset"), run.get("test_subset"))
    train = singleprocess.train_scratch if model == "lenet" else singleprocess.train_concise
    history = train(data, devices, run["epochs"], run["batch_size"], run["lr"], snakemake.params.seed)
    for row in history.itertuples():
        log.info("epoch %d: train loss %.4f, test acc %.4f, %.2f s", row.epoch, row.train_loss, row.test_acc, row.seconds)
    results.write_csv(history, snakemake.output[0])
